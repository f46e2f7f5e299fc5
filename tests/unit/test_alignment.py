"""The alignment scores of chapter 2."""

import pytest
import torch

from attnlab.alignment import date_alignment_accuracy, reverse_alignment_accuracy


def test_reverse_alignment_of_the_anti_diagonal_is_perfect():
    S = 6
    perfect = torch.eye(S).flip(1)  # row t puts all weight on S - 1 - t
    extra = torch.cat([perfect, torch.full((1, S), 1 / S)])  # the END step is not counted
    assert reverse_alignment_accuracy(extra, S) == 1.0
    assert reverse_alignment_accuracy(torch.eye(S), S) == 0.0  # the diagonal is copy, not reverse
    half = perfect.clone()
    half[:3] = torch.eye(S)[:3]
    assert reverse_alignment_accuracy(half, S) == 0.5


def test_date_alignment_counts_digits_that_look_at_their_field():
    source, target = "27 Sep 1994", "1994-09-27"  # day 0:2, month 3:6, year 7:11
    ideal = torch.zeros(11, len(source))
    for t, column in {0: 7, 1: 8, 2: 9, 3: 10, 5: 4, 6: 4, 8: 0, 9: 1}.items():
        ideal[t, column] = 1.0
    ideal[[4, 7, 10], 2] = 1.0  # separators and END: anywhere
    assert date_alignment_accuracy(ideal, source, target) == 1.0
    wrong_day = ideal.clone()
    wrong_day[8:10] = 0
    wrong_day[8:10, 8] = 1.0  # day digits looking at the year
    assert date_alignment_accuracy(wrong_day, source, target) == 6 / 8


def test_alignment_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"weights must have shape \(L, S\) \(one example\), got shape \(1, 4, 4\)"):
        reverse_alignment_accuracy(torch.zeros(1, 4, 4), 4)
    with pytest.raises(ValueError, match="need at least 5 rows and 5 columns"):
        reverse_alignment_accuracy(torch.zeros(4, 4), 5)
    with pytest.raises(ValueError, match="not 1994-09-27 in any known format"):
        date_alignment_accuracy(torch.zeros(11, 5), "hello", "1994-09-27")
