import pytest

from dreamgym_pl.core import DataError, Observation, Task, Transition, group_trajectories, read_jsonl, write_jsonl


def _tr(step, done=False, ep="e0"):
    return Transition(task=Task("t1", "buy a thing", {"asin": "b0x"}), step=step, state=Observation("s", ["click[a]"]),
                      action="click[a]", next_state=Observation("s2", []), reward=1.0 if done else 0.0, done=done,
                      source="oracle", info={"episode": ep})


def test_round_trip(tmp_path):
    items = [_tr(0), _tr(1, done=True)]
    p = tmp_path / "x.jsonl"
    assert write_jsonl(p, items) == 2
    back = read_jsonl(p, Transition)
    assert back == items


def test_malformed_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    write_jsonl(p, [_tr(0)])
    with open(p, "a") as f:
        f.write("{not json\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2"):
        read_jsonl(p, Transition)


def test_missing_field_names_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"task": {"task_id": "a", "instruction": "b"}}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1"):
        read_jsonl(p, Transition)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_jsonl(tmp_path / "none.jsonl")


def test_group_trajectories():
    trajs = group_trajectories([_tr(0), _tr(1, True), _tr(0, ep="e1"), _tr(1, ep="e1")])
    assert [len(t.transitions) for t in trajs] == [2, 2]


def test_to_dict_equals_asdict_and_copies_containers():
    import dataclasses

    from dreamgym_pl.core import Trajectory, to_dict

    t = _tr(0)
    t.info = {"episode": "e0", "nested": {"ids": [1, 2, (3, "x")], "ok": True, "none": None}, "pair": (0.5, [1])}
    for obj in (t, Trajectory(task=t.task, transitions=[t, _tr(1, done=True)]), t.task, t.state):
        assert to_dict(obj) == dataclasses.asdict(obj)
    d = to_dict(t)
    d["info"]["nested"]["ids"].append(9)  # the result shares no container with the transition
    d["state"]["admissible"].append("x")
    assert t.info["nested"]["ids"] == [1, 2, (3, "x")] and t.state.admissible == ["click[a]"]
