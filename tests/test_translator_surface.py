"""What a notebook user sees of a Translator: a readable repr, and a capital kept at the start."""

from __future__ import annotations

from attnlab.translator import Translator, restore_case


def test_restore_case_keeps_a_leading_capital_only():
    assert restore_case("I'm home.", "je suis chez moi.") == "Je suis chez moi."
    assert restore_case("  Go.", "va !") == "Va !"
    assert restore_case("i'm home .", "je suis chez moi.") == "je suis chez moi."
    assert restore_case("42 cats", "42 chats") == "42 chats"
    assert restore_case("Go.", "") == ""


def test_a_source_in_a_caseless_script_gives_a_sentence_that_starts_with_a_capital():
    assert restore_case("我在家里。", "i'm home.") == "I'm home."  # Tatoeba's English references do
    assert restore_case("  谢谢。", "thank you.") == "Thank you."
    assert restore_case("「はい」", "yes.") == "yes."  # punctuation first: nothing to go by


def test_translations_start_with_a_capital_when_the_source_does(tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"), device="cpu")
    lower, upper = tr.translate(["twenty one", "Twenty one"])
    assert lower and upper == lower[:1].upper() + lower[1:]
    assert tr.translate_full("Twenty one")[0].text == upper
    assert tr.attention("Twenty one").translation == upper  # the web page's answer too
    tr.restore_case = False
    assert tr.translate("Twenty one") == lower


def test_repr_names_the_run_and_the_model(tiny_runs):
    run = tiny_runs("transformer")
    text = repr(Translator.from_run(run, device="cpu"))
    assert text.startswith(f"Translator({run}, kind=transformer, en→fr, checkpoint=step-") and "device=cpu" in text
    assert "params=" in text and "<" not in text


def test_decoding_times_each_batch_for_the_thread_tuner(tiny_runs):
    """`translate`, `evaluate` and `serve` adapt their threads per batch of sentences (attnlab/threads.py):
    every batch is timed once, by the calling thread's tuner, and the translations do not change."""
    import dataclasses

    import torch

    from attnlab.threads import ThreadTuner

    tr = Translator.from_run(tiny_runs("transformer"), which="last", device="cpu")
    sentences = ["one", "two hundred", "three thousand four", "five", "six", "seven"]
    plain = tr.translate(sentences)
    seen: list[int] = []
    tr.adapt_threads(2)
    try:
        tuner = tr.thread_tuner()
    finally:
        torch.set_num_threads(1)  # the tuner starts on its maximum; later tests expect the conftest's one
    assert isinstance(tuner, ThreadTuner) and tuner is tr.thread_tuner() and (tuner.min, tuner.max) == (1, 2)
    tuner._apply = seen.append  # the decisions, not torch's thread count
    tr.cfg = dataclasses.replace(tr.cfg, decode=dataclasses.replace(tr.cfg.decode, batch_size=2))
    assert tr.translate(sentences) == plain
    assert tuner.count == 3  # three batches of two


def test_tuned_batches_are_taken_in_a_spread_order_that_samples_every_length():
    """Sorted batches grow longer along the order and their cost per token drifts with them; a tuner that
    judged the next window against the last would see the drift. The spread order is a permutation whose
    every window of six covers short and long batches alike."""
    from attnlab.translator import spread_order

    for m in [0, 1, 2, 3, 7, 64, 100]:
        assert sorted(spread_order(m)) == list(range(m))
    order = spread_order(64)
    for i in range(0, 60, 6):
        window = order[i : i + 6]
        assert max(window) - min(window) >= 32, window  # half the range or more: not one stretch of lengths
    means = [sum(order[i : i + 6]) / 6 for i in range(0, 60, 6)]
    assert max(means) - min(means) < 16  # no trend from window to window (sorted: 6 to 57)
