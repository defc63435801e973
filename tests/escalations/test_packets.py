"""Failure-packet validation: the seed's packet passes, anything else is refused field by field."""

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from escalations.packets import (
    ENTRY_MAX_CHARS,
    ENTRY_MAX_LINES,
    LIST_MAX_ITEMS,
    PACKET_MAX_BYTES,
    QUESTION_MAX_CHARS,
    Packet,
    PacketError,
    RuledOut,
    packet_size,
    validate_packet,
)


def payload_hash(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


CUSTOMERS_COLUMNS = {
    "columns": ["column_name"],
    "rows": [["id"], ["email"], ["loyalty_points"], ["created_at"]],
}
PRICING_CONFIG = {
    "path": "config/pricing-config.yaml",
    "lines": [12, 14],
    "text": "discounts:\n  loyalty_points_threshold: 500\n  rule: gold",
}


def seed_packet() -> dict[str, Any]:
    """The seed's failure packet, as JSON, with its evidence written as evidence objects."""
    return {
        "task": "Add tier-based discount to order service",
        "tried": [
            "Resolve discount rule via customers.customer_tier (from plan)",
            "Reframed with live schema from information_schema",
        ],
        "ruled_out": [
            {
                "hypothesis": "column exists under another name",
                "how": "searched customers, accounts, loyalty_* for tier-like columns; none found",
            },
            {
                "hypothesis": "tier is computed elsewhere",
                "how": "grep for 'tier' in services/ and db/migrations; no producer found",
            },
        ],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'customers'",
                "payload_hash": payload_hash(CUSTOMERS_COLUMNS),
                "payload": CUSTOMERS_COLUMNS,
                "datasource": "orders-db",
            },
            {
                "kind": "file_read",
                "source": "config/pricing-config.yaml:12-14",
                "payload_hash": payload_hash(PRICING_CONFIG),
                "workspace": "order-service",
            },
        ],
        # YAML's folded `>` keeps the trailing newline.
        "smallest_unblocking_question": "Where does a customer's tier come from today: a new "
        "column we should add, or the loyalty_points threshold in pricing-config.yaml?\n",
    }


def errors_of(raw: object, **kwargs: Any) -> list[PacketError]:
    result = validate_packet(raw, **kwargs)
    assert isinstance(result, list), f"expected errors, got {result!r}"
    assert result, "an empty error list is never a verdict"
    return result


def locs(raw: object) -> list[str]:
    return [e.loc for e in errors_of(raw)]


def message(raw: object, loc: str) -> str:
    found = [e.msg for e in errors_of(raw) if e.loc == loc]
    assert len(found) == 1, f"expected one error at {loc}, got {errors_of(raw)}"
    return found[0]


def with_(**fields: Any) -> dict[str, Any]:
    packet = seed_packet()
    packet.update(fields)
    return packet


def without(*names: str) -> dict[str, Any]:
    packet = seed_packet()
    for name in names:
        del packet[name]
    return packet


def test_it_accepts_the_seeds_packet() -> None:
    packet = validate_packet(seed_packet())

    assert isinstance(packet, Packet)
    assert packet.task == "Add tier-based discount to order service"
    assert packet.tried[1] == "Reframed with live schema from information_schema"
    assert packet.ruled_out[1] == RuledOut(
        hypothesis="tier is computed elsewhere",
        how="grep for 'tier' in services/ and db/migrations; no producer found",
    )
    assert packet.evidence[0]["payload"] == CUSTOMERS_COLUMNS
    assert packet.smallest_unblocking_question.endswith("pricing-config.yaml?")
    assert packet.options == ()


def test_a_packet_survives_its_own_json() -> None:
    packet = validate_packet(with_(options=["add customers.tier", "use loyalty_points"]))
    assert isinstance(packet, Packet)

    assert validate_packet(json.loads(json.dumps(packet.as_json()))) == packet


def test_it_names_every_missing_field_at_once() -> None:
    assert locs({}) == [
        "packet.task",
        "packet.tried",
        "packet.ruled_out",
        "packet.evidence",
        "packet.smallest_unblocking_question",
    ]


def test_it_prefixes_locations_with_the_callers_loc() -> None:
    assert [e.loc for e in errors_of(without("tried"), loc="data.packet")] == ["data.packet.tried"]


@pytest.mark.parametrize("raw", [None, [], "stuck", 3, True])
def test_a_packet_must_be_an_object(raw: object) -> None:
    (error,) = errors_of(raw)

    assert error.loc == "packet"
    assert "must be an object" in error.msg


def test_ruled_out_may_be_empty_but_must_be_sent() -> None:
    assert isinstance(validate_packet(with_(ruled_out=[])), Packet)
    assert "send [] if you ruled nothing out" in message(without("ruled_out"), "packet.ruled_out")


@pytest.mark.parametrize("name", ["tried", "evidence"])
def test_tried_and_evidence_must_not_be_empty(name: str) -> None:
    assert message(with_(**{name: []}), f"packet.{name}").startswith("is empty")


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"task": ""}, "packet.task"),
        ({"task": "   "}, "packet.task"),
        ({"tried": ["looked at the plan", " "]}, "packet.tried.1"),
        ({"ruled_out": [{"hypothesis": "", "how": "grep"}]}, "packet.ruled_out.0.hypothesis"),
        ({"ruled_out": [{"hypothesis": "renamed", "how": "\n"}]}, "packet.ruled_out.0.how"),
        ({"smallest_unblocking_question": ""}, "packet.smallest_unblocking_question"),
        ({"options": ["add a column", ""]}, "packet.options.1"),
    ],
)
def test_it_refuses_empty_text(fields: dict[str, Any], loc: str) -> None:
    assert message(with_(**fields), loc).startswith("is empty")


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"smallest_unblocking_question": "?"}, "packet.smallest_unblocking_question"),
        ({"smallest_unblocking_question": "TODO?"}, "packet.smallest_unblocking_question"),
        ({"smallest_unblocking_question": "¿?"}, "packet.smallest_unblocking_question"),
        ({"smallest_unblocking_question": "\u200b?"}, "packet.smallest_unblocking_question"),
        ({"tried": ["n/a"]}, "packet.tried.0"),
        ({"tried": ["looked at the plan", "."]}, "packet.tried.1"),
        ({"tried": ["N/A" + "\u200b" * 60 + " ..."]}, "packet.tried.0"),
        ({"tried": ["ｐｌａｃｅｈｏｌｄｅｒ"]}, "packet.tried.0"),
    ],
)
def test_it_refuses_a_placeholder_for_the_question_or_an_attempt(
    fields: dict[str, Any], loc: str
) -> None:
    """A careless agent's "?" (or "TODO?", a zero-width space and "?") was a question a reviewer
    saw as "?"; "n/a" was what it tried."""
    assert "a placeholder" in message(with_(**fields), loc)


def test_a_short_real_question_is_a_question() -> None:
    assert isinstance(validate_packet(with_(smallest_unblocking_question="EUR or USD?")), Packet)


def test_it_names_each_unknown_field() -> None:
    packet = with_(priority="high", agent="coder-a")

    assert locs(packet) == ["packet.priority", "packet.agent"]
    assert message(packet, "packet.priority").startswith("unknown field; a packet has only task")


@pytest.mark.parametrize("name", ["transcript", "messages", "log", "history", "Conversation"])
def test_a_transcript_field_is_refused_as_a_transcript(name: str) -> None:
    packet = with_(**{name: [{"role": "assistant", "content": "I will now check the schema"}]})

    assert "a packet is not a transcript" in message(packet, f"packet.{name}")


def test_a_tried_entry_may_be_a_paragraph_but_not_a_dump() -> None:
    at_limit = "x" * ENTRY_MAX_CHARS
    assert isinstance(validate_packet(with_(tried=[at_limit])), Packet)

    msg = message(with_(tried=["ok", at_limit + "x"]), "packet.tried.1")

    assert msg.startswith(f"is {ENTRY_MAX_CHARS + 1:,} characters")
    assert "a packet is not a transcript" in msg


def test_a_tried_entry_of_many_lines_is_a_dump() -> None:
    lines = "\n".join(f"step {i}" for i in range(ENTRY_MAX_LINES + 1))

    assert f"has {ENTRY_MAX_LINES + 1} lines" in message(with_(tried=[lines]), "packet.tried.0")


def test_a_pasted_chat_is_refused_wherever_it_is_pasted() -> None:
    chat = "user: add the discount\nassistant: I'll use customer_tier\ntool: ok"
    packet = with_(
        tried=[chat],
        ruled_out=[{"hypothesis": "renamed column", "how": chat}],
        options=[chat],
    )

    assert locs(packet) == ["packet.tried.0", "packet.ruled_out.0.how", "packet.options.0"]
    assert "reads like a chat log (3 lines" in message(packet, "packet.tried.0")


def test_one_line_naming_a_tool_is_not_a_chat() -> None:
    assert isinstance(
        validate_packet(with_(tried=["tool: ran pytest -k discount; 2 failed"])), Packet
    )


def test_a_list_may_hold_at_most_twenty_entries() -> None:
    packet = with_(tried=[f"attempt {i}" for i in range(LIST_MAX_ITEMS + 1)])

    assert message(packet, "packet.tried").startswith(f"has {LIST_MAX_ITEMS + 1} entries")


@pytest.mark.parametrize(
    ("fields", "loc", "says"),
    [
        ({"task": 42}, "packet.task", "must be a string, not a number"),
        ({"tried": "everything"}, "packet.tried", "must be an array of strings, not a string"),
        ({"tried": [True]}, "packet.tried.0", "must be a string, not a boolean"),
        ({"ruled_out": {}}, "packet.ruled_out", "must be an array of objects, not an object"),
        ({"ruled_out": ["renamed"]}, "packet.ruled_out.0", "must be an object {hypothesis, how}"),
        ({"evidence": {"kind": "file_read"}}, "packet.evidence", "must be an array of evidence"),
        ({"evidence": [7]}, "packet.evidence.0", "not a number"),
        (
            {"smallest_unblocking_question": ["Why?"]},
            "packet.smallest_unblocking_question",
            "an array",
        ),
        ({"options": None}, "packet.options", "must be an array of strings, not null"),
        ({"options": [1, 2]}, "packet.options.0", "must be a string, not a number"),
    ],
)
def test_it_names_wrong_types_in_json_words(fields: dict[str, Any], loc: str, says: str) -> None:
    assert says in message(with_(**fields), loc)


def test_a_ruled_out_entry_has_exactly_a_hypothesis_and_how() -> None:
    packet = with_(
        ruled_out=[
            {"hypothesis": "renamed column", "how": "searched", "confidence": 0.9},
            {"hypothesis": "computed elsewhere"},
        ]
    )

    assert locs(packet) == ["packet.ruled_out.0.confidence", "packet.ruled_out.1.how"]
    assert message(packet, "packet.ruled_out.1.how") == "is required: say how you ruled it out"


def test_a_sentence_is_not_evidence() -> None:
    packet = with_(evidence=["plan_claim: 'customers.customer_tier exists' (status: refuted)"])

    msg = message(packet, "packet.evidence.0")

    assert "not a sentence" in msg
    assert "point at the query, file, request or test run" in msg


def test_evidence_names_each_bad_field() -> None:
    packet = with_(
        evidence=[
            {"kind": "vibes", "source": "", "payload_hash": "9f3a...e1", "summary": "it's fine"},
            {"kind": "test_run"},
        ]
    )

    assert locs(packet) == [
        "packet.evidence.0.summary",
        "packet.evidence.0.kind",
        "packet.evidence.0.source",
        "packet.evidence.0.payload_hash",
        "packet.evidence.1.source",
        "packet.evidence.1.payload_hash",
    ]
    assert "must be one of query_result, file_read" in message(packet, "packet.evidence.0.kind")
    assert "'9f3a...e1'" in message(packet, "packet.evidence.0.payload_hash")


@pytest.mark.parametrize(
    "bad",
    [
        "9f3a" * 16,
        "sha256:" + "9F3A" * 16,
        "sha256:" + "9f3a" * 15,
        "sha1:" + "9f3a" * 16,
        "sha256:" + "9f3a" * 16 + "\n",
        7,
    ],
)
def test_a_payload_hash_is_sha256_and_64_lowercase_hex(bad: object) -> None:
    evidence = {"kind": "test_run", "source": "pytest -q", "payload_hash": bad}

    assert "'sha256:' followed by the 64 lowercase hex digits" in message(
        with_(evidence=[evidence]), "packet.evidence.0.payload_hash"
    )


def test_an_agent_cannot_hand_over_a_reviewers_answer() -> None:
    # A careless agent makes up the answer it wants and cites a reviewer for it.
    answer = {"text": "use the loyalty_points threshold"}
    evidence = {
        "kind": "human_answer",
        "source": "reviewer:alice",
        "payload_hash": payload_hash(answer),
        "payload": answer,
    }
    packet = with_(evidence=[seed_packet()["evidence"][0], evidence])

    assert locs(packet) == ["packet.evidence.1.kind"]
    assert message(packet, "packet.evidence.1.kind").startswith(
        "is human_answer: a reviewer's answer is recorded by Bulkhead when a reviewer gives it, "
        "and an agent cannot hand one over"
    )


@pytest.mark.parametrize(
    "source",
    [
        "agent:planner",
        "  Agent:schema said the column exists",
        # What a careless agent types for it, read as a person reads it.
        "agent :alpha",
        "agent\uff1aalpha",  # a full-width colon
        "\uff41gent:alpha",  # a full-width a
        "\u200bagent:alpha",
        "\ufeffagent:alpha",
        "agent\u00ad:alpha",
    ],
)
def test_another_agents_text_is_not_packet_evidence(source: str) -> None:
    evidence = {"kind": "file_read", "source": source, "payload_hash": payload_hash({})}
    packet = with_(evidence=[evidence])

    assert locs(packet) == ["packet.evidence.0.source"]
    assert "cites another agent's text" in message(packet, "packet.evidence.0.source")
    assert "which is not evidence" in message(packet, "packet.evidence.0.source")


def test_an_evidence_payload_is_an_object() -> None:
    evidence = {
        "kind": "test_run",
        "source": "pytest",
        "payload_hash": payload_hash({}),
        "payload": "ok",
    }

    assert "must be an object" in message(with_(evidence=[evidence]), "packet.evidence.0.payload")


def test_the_question_may_be_at_most_500_characters() -> None:
    stem = "Which column holds the tier "
    at_limit = stem + "x" * (QUESTION_MAX_CHARS - len(stem) - 1) + "?"
    assert len(at_limit) == QUESTION_MAX_CHARS
    assert isinstance(validate_packet(with_(smallest_unblocking_question=at_limit)), Packet)

    msg = message(
        with_(smallest_unblocking_question="x" + at_limit), "packet.smallest_unblocking_question"
    )

    assert msg.startswith("is 501 characters")


@pytest.mark.parametrize(
    "question",
    [
        "Where does the tier come from? And should I add a column?",
        "Column or config?\nWhich file?",
        "Is it customers.tier? accounts.tier?",
        'Should I ask "is it a column?" or "is it config?"',
        "ティアはどこから来ますか？列を追加すべきですか？",
    ],
)
def test_it_refuses_several_questions(question: str) -> None:
    msg = message(
        with_(smallest_unblocking_question=question), "packet.smallest_unblocking_question"
    )

    assert msg.startswith("asks ")
    assert "put alternatives in options" in msg


@pytest.mark.parametrize(
    "question",
    [
        "Should the discount key off `customers.tier?` or the loyalty_points threshold?",
        "Is https://pricing.internal/rules?tier=gold the source of truth?",
        "Really, no tier column anywhere??",
        "Where does the tier come from? I checked customers and accounts.",
        "Which one applies (column or config)?",
        "Where does a customer's tier come from today:\na new column, or the loyalty_points threshold?",
        "Ｗhich API key should t2 use？",
        "顧客のティアはどの列から来ますか？",
        "ما هو مصدر الفئة؟",
    ],
)
def test_it_accepts_one_question(question: str) -> None:
    assert isinstance(validate_packet(with_(smallest_unblocking_question=question)), Packet)


def test_a_statement_is_not_a_question() -> None:
    msg = message(
        with_(smallest_unblocking_question="Please tell me where the tier comes from."),
        "packet.smallest_unblocking_question",
    )

    assert msg.startswith("is not a question")


def test_options_are_optional_but_never_empty_or_repeated() -> None:
    assert isinstance(validate_packet(with_(options=["add a column"])), Packet)
    assert message(with_(options=[]), "packet.options").startswith("is empty")

    repeated = with_(options=["Add a column", "use loyalty_points", "add a column "])

    assert message(repeated, "packet.options.2") == "repeats option 0; options must differ"


def test_it_finds_a_nul_byte_in_any_string() -> None:
    packet = seed_packet()
    packet["task"] = "Add tier\x00"
    packet["tried"][1] = "Reframed\x00"
    packet["ruled_out"][0]["how"] = "\x00grep"
    packet["evidence"][0]["source"] = "SELECT 1\x00"
    packet["evidence"][0]["payload"] = {"columns": ["a\x00"], "rows": [[1, "\x00"]], "k\x00": 1}
    packet["smallest_unblocking_question"] = "Which?\x00"
    packet["options"] = ["column", "config\x00"]

    errors = errors_of(packet)

    assert [e.loc for e in errors] == [
        "packet.task",
        "packet.tried.1",
        "packet.ruled_out.0.how",
        "packet.evidence.0.source",
        "packet.evidence.0.payload.columns.0",
        "packet.evidence.0.payload.k\\u0000",
        "packet.evidence.0.payload.rows.0.1",
        "packet.smallest_unblocking_question",
        "packet.options.1",
    ]
    assert all("NUL byte" in e.msg for e in errors)
    assert errors[5].msg.startswith("field name contains a NUL byte")


def test_a_field_name_with_a_nul_is_escaped_in_the_error() -> None:
    (error,) = errors_of(with_(**{"tri\x00ed": []}))

    assert error.loc == "packet.tri\\u0000ed"
    assert "\x00" not in error.msg


def test_it_refuses_an_unpaired_surrogate() -> None:
    assert "unpaired surrogate" in message(with_(task="tier \ud800"), "packet.task")


def test_it_reports_every_bad_field_of_a_bad_packet_together() -> None:
    packet = {
        "task": "",
        "tried": "I tried everything",
        "ruled_out": [{"hypothesis": "renamed"}],
        "evidence": ["the plan says so"],
        "smallest_unblocking_question": "Why? How?",
        "options": [],
        "transcript": "user: ...",
    }

    assert locs(packet) == [
        "packet.transcript",
        "packet.task",
        "packet.tried",
        "packet.ruled_out.0.how",
        "packet.evidence.0",
        "packet.smallest_unblocking_question",
        "packet.options",
    ]


def test_a_packet_over_64_kib_is_refused_whole() -> None:
    packet = with_(
        evidence=[
            {
                "kind": "test_run",
                "source": "pytest",
                "payload_hash": payload_hash({}),
                "payload": {"output": "x" * PACKET_MAX_BYTES},
            }
        ]
    )

    (error,) = errors_of(packet)

    assert packet_size(packet) > PACKET_MAX_BYTES
    assert error.loc == "packet"
    assert error.msg.startswith(f"is {packet_size(packet):,} bytes")


def test_the_size_is_the_compact_utf8_json() -> None:
    packet = with_(task="Réduction par palier ✓")

    expected = json.dumps(packet, separators=(",", ":"), ensure_ascii=False).encode()

    assert packet_size(packet) == len(expected)


def test_it_does_not_change_what_it_was_given() -> None:
    packet = with_(options=["  add a column  "])
    before = copy.deepcopy(packet)

    validate_packet(packet)

    assert packet == before


ANY_CHARACTER = st.characters(exclude_categories=())  # NUL and lone surrogates too
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(ANY_CHARACTER, max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(ANY_CHARACTER, max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
FIELD_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "task": JSON,
        "tried": JSON,
        "ruled_out": JSON,
        "evidence": JSON,
        "smallest_unblocking_question": JSON,
        "options": JSON,
        "extra": JSON,
    },
)


@given(JSON | FIELD_VALUES)
def test_any_json_gets_a_packet_or_located_errors(raw: object) -> None:
    result = validate_packet(raw, loc="data.packet")

    if isinstance(result, list):
        assert result
        for error in result:
            assert error.loc == "data.packet" or error.loc.startswith("data.packet.")
            assert error.msg
            echoed = error.loc + error.msg
            assert "\x00" not in echoed
            assert not any("\ud800" <= ch <= "\udfff" for ch in echoed)
    else:
        assert isinstance(result, Packet)


TEXT = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00?\n"), min_size=1, max_size=60
).filter(lambda s: s.strip() and s == s.strip())


# Words a person can act on: a placeholder ("?", "n/a") is refused as one.
WORDS = TEXT.map(lambda text: f"read {text}")


@given(
    tried=st.lists(WORDS, min_size=1, max_size=5),
    ruled_out=st.lists(st.tuples(TEXT, TEXT), max_size=3),
    question=WORDS,
    options=st.lists(TEXT, max_size=4, unique_by=str.casefold),
)
def test_any_well_formed_packet_is_accepted_as_sent(
    tried: list[str], ruled_out: list[tuple[str, str]], question: str, options: list[str]
) -> None:
    raw = with_(
        tried=tried,
        ruled_out=[{"hypothesis": h, "how": w} for h, w in ruled_out],
        smallest_unblocking_question=question + "?",
        **({"options": options} if options else {}),
    )

    packet = validate_packet(raw)

    assert isinstance(packet, Packet), packet
    assert packet.as_json() == raw


def test_evidence_whose_payload_is_not_what_its_hash_says_is_named():
    real = {"columns": ["column_name"], "rows": [["loyalty_points"]]}
    forged = {"columns": ["column_name"], "rows": [["customer_tier"]]}
    raw = {
        "task": "plan",
        "tried": ["the plan's column"],
        "ruled_out": [],
        "evidence": [
            {
                "kind": "query_result",
                "source": "SELECT 1",
                "payload_hash": payload_hash(real),
                "payload": forged,
            }
        ],  # fmt: skip
        "smallest_unblocking_question": "Where does a customer's tier come from?",
    }
    errors = validate_packet(raw)
    assert isinstance(errors, list)
    assert [e.loc for e in errors] == ["packet.evidence.0.payload_hash"]
    assert payload_hash(forged) in errors[0].msg
    raw["evidence"][0]["payload"] = real
    assert not isinstance(validate_packet(raw), list)
