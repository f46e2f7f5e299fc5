"""The generated data: dates, copy/reverse sequences, the vocabulary and padded batches."""

import datetime as dt

import pytest
import torch

from attnlab.data import (
    DATE_FORMATS,
    CharVocab,
    date_spans,
    detect_format,
    format_date,
    make_batch,
    make_date_pairs,
    make_sequence_pairs,
    ngram_distance,
)


def test_there_are_at_least_ten_date_formats_and_each_is_distinct():
    day = dt.date(1994, 9, 27)
    written = {name: format_date(day, name) for name in DATE_FORMATS}
    assert len(DATE_FORMATS) >= 10
    assert len(set(written.values())) == len(written)
    assert written["long"] == "september 27, 1994"
    assert written["day_month_abbr"] == "27 Sep 1994"
    assert written["weekday_numeric"] == "Tue, 27/09/94"
    assert written["chinese"] == "1994年9月27日"


def test_every_format_keeps_the_information_of_the_date():
    # Two different days never print the same in any one format, over a span of years.
    for name in DATE_FORMATS:
        seen = {}
        for n in range(0, 36_500, 7):
            day = dt.date(1950, 1, 1) + dt.timedelta(n)
            text = format_date(day, name)
            assert seen.setdefault(text, day) == day, f"{name}: {text!r} is ambiguous"


def test_date_pairs_have_the_requested_sizes_and_iso_targets():
    train, test = make_date_pairs(300, 50, seed=3)
    assert len(train) == 300 and len(test) == 50
    for source, target in train + test:
        day = dt.date.fromisoformat(target)
        assert any(format_date(day, f) == source for f in DATE_FORMATS)


def test_held_out_dates_never_occur_in_training_whatever_the_seed():
    train_a, test_a = make_date_pairs(20_000, 2_000, seed=0)
    train_b, _ = make_date_pairs(20_000, 10, seed=1)
    held = {t for _, t in test_a}
    assert not held & {t for _, t in train_a}
    assert not held & {t for _, t in train_b}


def test_date_pairs_are_deterministic_under_a_seed():
    assert make_date_pairs(100, 10, seed=5) == make_date_pairs(100, 10, seed=5)
    assert make_date_pairs(100, 10, seed=5) != make_date_pairs(100, 10, seed=6)


def test_date_pairs_can_be_restricted_to_some_formats():
    train, _ = make_date_pairs(50, 5, formats=["dotted"])
    assert all(s.count(".") == 2 for s, _ in train)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_train": -1}, ValueError, "n_train must be an int >= 0, got -1"),
        ({"n_test": 2.5}, TypeError, "n_test must be an int"),
        ({"formats": ["klingon"]}, ValueError, r"unknown formats \['klingon'\]"),
        ({"formats": []}, ValueError, "formats must name at least one format"),
        ({"held_out_fraction": 1.0}, ValueError, r"held_out_fraction must be in \(0, 1\)"),
    ],
)
def test_bad_date_arguments_are_explained(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_date_pairs(**kwargs)


def test_format_date_errors():
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        format_date(dt.date(2000, 1, 1), "nope")
    with pytest.raises(TypeError, match=r"day must be a datetime\.date"):
        format_date("2000-01-01", "long")


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_sequence_pairs(task):
    pairs = make_sequence_pairs(task, 200, 3, 120, n_symbols=5, seed=2)
    assert len(pairs) == 200
    for source, target in pairs:
        assert 3 <= len(source) <= 120 and set(source) <= set("abcde")
        assert target == (source if task == "copy" else source[::-1])
    assert max(len(s) for s, _ in pairs) > 100
    assert pairs == make_sequence_pairs(task, 200, 3, 120, n_symbols=5, seed=2)


def test_log_uniform_lengths_balance_tokens_across_lengths():
    pairs = make_sequence_pairs("copy", 20_000, 5, 100, lengths="log-uniform", seed=0)
    tokens_short = sum(len(s) for s, _ in pairs if len(s) < 20)  # lengths 5..19: 15 lengths
    tokens_long = sum(len(s) for s, _ in pairs if 80 <= len(s) < 95)  # lengths 80..94: 15 lengths
    assert 0.8 < tokens_short / tokens_long < 1.25
    uniform = make_sequence_pairs("copy", 20_000, 5, 100, seed=0)
    assert sum(len(s) < 20 for s, _ in pairs) > 3 * sum(len(s) < 20 for s, _ in uniform)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("sort", 5, 1, 3), {}, "task must be one of"),
        (("copy", 5, 0, 3), {}, "min_len must be an int >= 1, got 0"),
        (("copy", 5, 4, 3), {}, r"max_len must be an int >= 4 \(min_len\), got 3"),
        (("copy", -1, 1, 3), {}, "n must be an int >= 0, got -1"),
        (("copy", 5, 1, 3), {"n_symbols": 1}, r"n_symbols must be an int in \[2, 26\], got 1"),
        (("copy", 5, 1, 3), {"lengths": "normal"}, "lengths must be one of"),
    ],
)
def test_bad_sequence_arguments_are_explained(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_sequence_pairs(*args, **kwargs)


def test_vocab_round_trip_and_special_tokens():
    vocab = CharVocab.from_texts(["27 Sep 1994", "1994年9月27日"])
    for text in ["27 Sep 1994", "1994年9月27日", "9"]:
        ids = vocab.encode(text, start=True, end=True)
        assert ids[0] == CharVocab.START and ids[-1] == CharVocab.END
        assert vocab.decode(ids) == text
    assert vocab.decode([vocab.stoi["9"], CharVocab.END, vocab.stoi["1"]]) == "9"  # stops at END
    assert vocab.decode(torch.tensor([CharVocab.PAD, vocab.stoi["S"]])) == "S"


def test_vocab_errors_name_the_problem():
    vocab = CharVocab("abc")
    with pytest.raises(ValueError, match=r"characters \['z'\] of 'az' are not in the vocabulary"):
        vocab.encode("az")
    with pytest.raises(TypeError, match="text must be a str"):
        vocab.encode(["a"])
    with pytest.raises(ValueError, match="id 99 is outside the vocabulary of 6 tokens"):
        vocab.decode([99])
    with pytest.raises(ValueError, match="single-character strings"):
        CharVocab(["ab"])


def test_make_batch_pads_and_shifts_targets():
    vocab = CharVocab("abc")
    batch = make_batch([("abc", "cb"), ("a", "abca")], vocab, vocab)
    a, b, c = (vocab.stoi[x] for x in "abc")
    P, S, E = CharVocab.PAD, CharVocab.START, CharVocab.END
    assert batch.src.tolist() == [[a, b, c], [a, P, P]]
    assert batch.src_lengths.tolist() == [3, 1]
    assert batch.tgt_in.tolist() == [[S, c, b, P, P], [S, a, b, c, a]]
    assert batch.tgt_out.tolist() == [[c, b, E, P, P], [a, b, c, a, E]]
    assert len(batch) == 2


def test_make_batch_errors():
    vocab = CharVocab("ab")
    with pytest.raises(ValueError, match="at least one"):
        make_batch([], vocab, vocab)
    with pytest.raises(ValueError, match="every source must have at least one character"):
        make_batch([("", "a")], vocab, vocab)


def test_date_spans_locate_year_month_and_day_in_every_format():
    day = dt.date(2003, 11, 5)
    for name in DATE_FORMATS:
        text = format_date(day, name)
        spans = date_spans(day, name)
        assert set(spans) == {"year", "month", "day"}
        year, month, dayp = (text[a:b] for a, b in (spans["year"], spans["month"], spans["day"]))
        assert year in ("2003", "03"), (name, year)
        assert month.lower() in ("11", "nov", "november"), (name, month)
        assert dayp in ("5", "05", "5th"), (name, dayp)
        starts = sorted(a for a, _ in spans.values())
        ends = sorted(b for _, b in spans.values())
        # each span ends before the next one starts (the last end has no next start)
        assert all(e <= s for e, s in zip(ends, starts[1:], strict=False)), f"{name}: spans overlap"


def test_detect_format_recovers_the_format():
    day = dt.date(1977, 2, 8)
    for name in DATE_FORMATS:
        assert detect_format(format_date(day, name), day.isoformat()) == name
    with pytest.raises(ValueError, match="is not 1977-02-08 in any known format"):
        detect_format("8 2 1977", "1977-02-08")


def test_ngram_distance_finds_where_the_same_tokens_last_ended():
    ids = torch.tensor([1, 2, 1, 2, 1, 2, 3, 1, 2])
    assert ngram_distance(ids, n=2).tolist() == [-1, -1, -1, 2, 2, 2, -1, -1, 3]
    assert ngram_distance(ids, n=1).tolist() == [-1, -1, 2, 2, 2, 2, -1, 3, 3]
    torch.manual_seed(0)
    rows = torch.randint(0, 3, (2, 3, 40))  # rows kept apart, the shape kept
    found = ngram_distance(rows, n=3)
    assert found.shape == rows.shape and found.dtype == torch.long
    for row, dist in zip(rows.view(-1, 40).tolist(), found.view(-1, 40).tolist(), strict=True):
        for t, d in enumerate(dist):  # against the definition, by brute force
            earlier = [s for s in range(2, t) if row[s - 2 : s + 1] == row[t - 2 : t + 1]] if t >= 2 else []
            assert d == (t - max(earlier) if earlier else -1)
    with pytest.raises(TypeError, match=r"^ngram_distance: ids must be an integer tensor, got torch.float32$"):
        ngram_distance(torch.zeros(4))
    with pytest.raises(ValueError, match=r"^ngram_distance: n must be an int >= 1, got 0$"):
        ngram_distance(ids, n=0)
    with pytest.raises(ValueError, match=r"^ngram_distance: ids must have shape \(\.\.\., N\), got a scalar$"):
        ngram_distance(torch.tensor(3))
