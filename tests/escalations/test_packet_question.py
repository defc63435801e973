"""The rule that says two packets ask the same question: the normalised question, or the same
`dedup_key` (pure: `escalations.packets.question_key`, `same_question`)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escalations.packets import asks_again, question_key, same_question, validate_packet
from tests.escalations.desk import QUESTION, packet


def test_case_spacing_and_punctuation_are_set_aside() -> None:
    assert question_key("Which tier source?") == question_key("  which   TIER source ? ")
    assert question_key("Which tier source?") == question_key("Which tier-source?")
    assert question_key("Which tier source?") != question_key("Which tier sources?")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("Should gold customers get a discount of +5%?", "… of -5%?"),
        ("Is the threshold > 500 points?", "Is the threshold < 500 points?"),
        ("Is the threshold >= 500 points?", "Is the threshold = 500 points?"),
        ("Is the budget $500?", "Is the budget €500?"),
        ("Is the offset -3 hours?", "Is the offset 3 hours?"),
    ],
)
def test_signs_and_comparisons_are_part_of_the_question(one: str, other: str) -> None:
    """An independent careless agent's "+5%" and "-5%" joined one escalation: one answer would
    have released both."""
    other = one.replace("of +5%", "of -5%") if other.startswith("…") else other
    assert question_key(one) != question_key(other)


@pytest.mark.parametrize("invisible", ["\u200b", "\u00ad", "\u2060", "\ufeff"])
def test_a_character_that_shows_nothing_does_not_split_a_word(invisible: str) -> None:
    """A zero-width space inside "tier" made "ti er": the same-looking question did not join."""
    assert question_key(f"Which ti{invisible}er source?") == question_key("Which tier source?")


ANSWERED = [{"smallest_unblocking_question": "Which tier source?", "tried": ["Read schema"]}]


@pytest.mark.parametrize(
    ("question", "dedup_key", "tried", "again"),
    [
        ("which  TIER source ?", "", ["read", "SCHEMA", "read schema"], True),
        ("Which currency?", "", ["Read schema"], False),  # another question
        ("Which tier source?", "", ["Read schema", "Used the answer: no rows"], False),
        ("Where do tiers come from?", "tiers", ["Read schema"], False),
    ],
)
def test_a_packet_asks_again_when_its_question_is_answered_and_its_tried_adds_nothing(
    question: str, dedup_key: str, tried: list[str], again: bool
) -> None:
    assert asks_again(question, dedup_key, tried, ANSWERED) is again


def test_the_same_dedup_key_asks_again_whatever_the_words() -> None:
    answered = [{**ANSWERED[0], "dedup_key": "tiers"}]
    assert asks_again("Where do tiers come from?", "tiers", ["Read schema"], answered)
    assert not asks_again("Which tier source?", "", ["Read schema"], [])


def test_a_hyphen_between_words_is_still_set_aside() -> None:
    assert question_key("Is it a follow-up?") == question_key("Is it a follow up?")
    assert question_key("Use tier-2 pricing?") == question_key("Use tier 2 pricing?")


@given(st.text(max_size=200))
def test_a_key_is_its_own_key(text: str) -> None:
    key = question_key(text)
    assert question_key(key) == key
    assert key == key.strip() and "  " not in key


@given(st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=40))
def test_added_spacing_punctuation_and_case_never_change_the_key(word: str) -> None:
    question = f"Where does {word} come from?"
    typings = [f"  {question}  ", question.replace(" ", " , "), question.replace("?", " ?!")]
    if word.upper().casefold() == word.casefold():  # not a letter whose case does not round-trip
        typings.append(question.upper())
    for typed in typings:
        assert question_key(typed) == question_key(question)


@pytest.mark.parametrize(
    ("mine", "theirs", "same"),
    [
        (("a b", ""), ("a b", ""), True),  # the same words
        (("a b", "k1"), ("x y", "k1"), True),  # the same key, whatever the words
        (("a b", "k1"), ("a b", "k2"), False),  # two keys say they differ
        (("a b", "k1"), ("a b", ""), True),  # one key: the words decide
        (("", ""), ("", ""), False),  # nothing to compare
    ],
)
def test_the_same_dedup_key_or_the_same_words(mine, theirs, same) -> None:
    assert (
        same_question(
            key=mine[0], dedup_key=mine[1], other_key=theirs[0], other_dedup_key=theirs[1]
        )
        is same
    )


def test_a_packet_keeps_its_dedup_key() -> None:
    checked = validate_packet(packet("plan", dedup_key="tier-source"))
    assert not isinstance(checked, list)
    assert checked.dedup_key == "tier-source"
    assert checked.as_json()["dedup_key"] == "tier-source"
    assert checked.smallest_unblocking_question == QUESTION
