"""experiments/diagnostics/webshop_option_outcomes.py: counts by the goal's number of options, by hand."""


def test_option_outcomes_hand_counts():
    import importlib.util
    from tests.conftest import ROOT

    path = ROOT / "experiments" / "diagnostics" / "webshop_option_outcomes.py"
    spec = importlib.util.spec_from_file_location("woo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    success = {"a": 1, "b": 0, "c": 0, "d": 1, "e": 0}
    score = {"a": 1.0, "b": 0.75, "c": 0.5, "d": 1.0, "e": 0.8}
    n_options = {"a": 2, "b": 2, "c": 3, "d": 1, "e": 0}
    assert mod.option_outcomes(success, score, n_options) == {"multi": 3, "multi_success": 1, "few": 2,
                                                               "few_success": 1, "multi_short": 1}
