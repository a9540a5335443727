"""Generation engine helpers: the trained response tokens are exactly those that produced the action."""

from dreamgym_pl.rollout.sampling import cut_at_stop, tokens_through_stop

PIECES = ["click", "[", "item", " 1", "]", "<eos>", "junk"]


def _decode(ids):
    return "".join(PIECES[i] for i in ids if PIECES[i] != "<eos>")


def test_cut_at_stop_earliest_end():
    assert cut_at_stop("click[a] x]", ["]"]) == ("click[a]", True)
    assert cut_at_stop("search[x", ["]"]) == ("search[x", False)
    # of two stop strings, the one that ends first wins
    assert cut_at_stop("ab</s>cd]", ["]", "</s>"]) == ("ab</s>", True)


def test_tokens_through_stop():
    # "click" "[" "item" " 1" "]" -> the 5th token completes the stop string
    assert tokens_through_stop([0, 1, 2, 3, 4, 6, 6], _decode, ["]"]) == 5
    assert tokens_through_stop([0, 1, 2, 3, 4, 5], _decode, ["]"]) == 5  # the EOS after "]" is dropped too
    assert tokens_through_stop([0, 1, 2, 6], _decode, ["]"]) == 4  # no stop: everything is kept
    assert tokens_through_stop([0, 1, 2, 6], _decode, []) == 4
    assert tokens_through_stop([4], _decode, ["]"]) == 1
