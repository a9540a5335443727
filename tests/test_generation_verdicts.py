"""experiments/generation_verdicts.py reads back what CurriculumLogs writes (generation_examples_text)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

from generation_verdicts import parse_examples, verdict_kind  # noqa: E402

from dreamgym_pl.stages.callbacks import generation_examples_text  # noqa: E402


def test_round_trip_and_kinds():
    ex = [("i need beef jerky, and price lower than 20.00 dollars", "i need a dresser, and price lower than 9 dollars",
           "rejected: not a beef jerky: 'a dresser'"),
          ("find me tea, and price lower than 5.00 dollars", "find me green tea, and price lower than 5 dollars", "accepted"),
          ("i want soap, and price lower than 3.00 dollars", "i want vegan soap, and price lower than 3 dollars",
           "rejected: unknown attributes 'vegan' for soap"),
          ("i want soap, and price lower than 3.00 dollars", "i want soap with size: 9, and price lower than 3 dollars",
           "rejected: option 'size: 9' is not one of a soap's"),
          ("i want soap, and price lower than 3.00 dollars", "<task> i want\n\nsoap", "rejected: no <task> ... </task>")]
    assert parse_examples(generation_examples_text(ex)) == ex
    assert [verdict_kind(v) for _, _, v in ex] == [
        "rejected: not a <type>: '...'", "accepted", "rejected: unknown attributes '...' for <type>",
        "rejected: option '...' is not one of a <type>'s", "rejected: no <task> ... </task>"]
    assert verdict_kind("rejected: no beef jerky of the catalogue fulfils it") == \
        "rejected: no <type> of the catalogue fulfils it"
    assert verdict_kind("rejected: an existing instruction") == "rejected: an existing instruction"
