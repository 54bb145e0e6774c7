"""Pairing unacknowledged submissions with what the site's task group holds after a crash
(``federation.runtime.intents``); the real kills are in ``tests/test_crash_points.py``."""

from __future__ import annotations

import json

from federation.runtime.intents import claimed_ids, settle


def test_one_submitting_record_and_one_unclaimed_task_are_paired() -> None:
    s = settle({("t1", None): "submitting"}, {"a", "b"}, ["a", "b", "c"])
    assert s.verdicts == {("t1", None): "claim"} and s.claimed_ids == {("t1", None): "c"}


def test_a_submission_the_group_does_not_hold_is_shipped_again() -> None:
    s = settle({("t1", None): "submitting", ("t2", None): None}, {"a"}, ["a"])
    assert s.verdicts == {("t1", None): "resend", ("t2", None): "resend"}
    assert s.claimed_ids == {}


def test_records_never_handed_to_a_site_need_no_question() -> None:
    s = settle({("t1", None): None, ("t2", 1): None}, set(), None)
    assert s.verdicts == {("t1", None): "resend", ("t2", 1): "resend"}


def test_ambiguity_is_said_not_guessed() -> None:
    s = settle({("t1", None): "submitting", ("t2", 0): "submitting"}, set(), ["x", "y"])
    assert set(s.verdicts.values()) == {"unknown"} and "cannot be told" in s.reason
    s = settle({("t1", None): "submitting"}, set(), ["x", "y"])
    assert s.verdicts == {("t1", None): "unknown"} and "x, y" in s.reason


def test_an_unreachable_service_leaves_the_question_open() -> None:
    s = settle({("t1", None): "submitting"}, set(), None)
    assert s.verdicts == {("t1", None): "unknown"} and "could not be asked" in s.reason


def test_earlier_attempts_and_copies_claim_their_ids() -> None:
    rows = [
        {"compute_task_id": "now", "attempts": json.dumps([{"compute_task_id": "before"}])},
        {"compute_task_id": None, "attempts": None},
    ]
    copies = [{"compute_task_id": "copy"}, {"compute_task_id": None}]
    assert claimed_ids(rows, copies) == {"now", "before", "copy"}
    # so a retried task's first attempt is not taken for an unacknowledged submission
    s = settle({("t", None): "submitting"}, claimed_ids(rows, copies), ["before", "now", "copy"])
    assert s.verdicts == {("t", None): "resend"}
