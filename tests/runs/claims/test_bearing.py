"""The rule that evidence bears on its claim: subjects, mentions, and payloads that agree."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.claims.bearing import (
    NO_SUBJECT,
    bearing,
    columns_of,
    mentions,
    stated_status,
    subjects_of,
)
from runs.claims.hashing import http_exchange_payload, query_result_payload, test_run_payload

INVENTED = "`customers` has a `customer_tier` column; use it to select the discount rule"
INFORMATION_SCHEMA = (
    "SELECT column_name FROM information_schema.columns "
    "WHERE table_schema = 'public' AND table_name = 'customers' ORDER BY ordinal_position"
)
REAL = query_result_payload(
    columns=["column_name"], rows=[["id"], ["name"], ["email"], ["loyalty_points"]]
)
WITH_TIER = query_result_payload(
    columns=["column_name"], rows=[["id"], ["loyalty_points"], ["customer_tier"]]
)
ONE = query_result_payload(columns=["one"], rows=[[1]])


def judged(statement: str, verdict: str, source: str, payload, *, kind="query_result", about=()):
    return bearing(
        subjects=subjects_of(about, statement),
        statement=statement,
        kind=kind,
        source=source,
        payload=payload,
        verdict=verdict,
    )


# Subjects -------------------------------------------------------------------------------------


def test_a_claims_subjects_are_its_code_spans_once_each():
    statement = "Use `customer_tier` on `customers`; `Customer_Tier` again, and `` nothing"
    assert subjects_of((), statement) == ("customer_tier", "customers")


def test_about_takes_the_place_of_the_code_spans_it_names():
    assert subjects_of(["customers.customer_tier "], INVENTED) == ("customers.customer_tier",)


def test_about_cannot_narrow_what_the_statement_names():
    """The careless way through: a weaker `about` than the statement. Its code spans still count."""
    statement = "`customers.customer_tier` exists"
    assert subjects_of(["customers"], statement) == ("customers", "customers.customer_tier")


def test_with_about_only_the_code_spans_that_name_a_thing_are_added():
    statement = "`GET /health` answers `200` from `config/app.yaml`"
    assert subjects_of(["https://api.example.com/health"], statement) == (
        "https://api.example.com/health",
        "config/app.yaml",
    )


def test_a_statement_without_code_spans_names_nothing():
    assert subjects_of((), "customers has a customer_tier column") == ()


# Mentions -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "subject", "mentioned"),
    [
        ("WHERE table_name = 'customers'", "customers", True),
        ("SELECT CUSTOMER_TIER FROM t", "customer_tier", True),  # case-insensitive
        ("SELECT customer_tier_id FROM t", "customer_tier", False),  # another identifier
        ("SELECT old_customer_tier FROM t", "customer_tier", False),
        ("SELECT c.customer_tier FROM customers c", "customer_tier", True),
        ("cat old-pricing-config.yaml", "pricing-config.yaml", False),
        ("config/pricing-config.yaml:3-4", "pricing-config.yaml", True),
        ("https://api.example.com/v1/customers/42", "/v1/customers", True),
        # table.column: whole, or each part, as a person reads a query of a table's columns
        ("SELECT customers.customer_tier FROM customers", "customers.customer_tier", True),
        ("table_name = 'customers' ... customer_tier", "customers.customer_tier", True),
        ("table_name = 'customers'", "customers.customer_tier", False),
        ("schema public, table customers, customer_tier", "public.customers.customer_tier", True),
        # a file name is not a table and a column
        ("config: yes\nformat: yaml", "config.yaml", False),
        ("config.yaml:1-2", "config.yaml", True),
    ],
)
def test_a_subject_is_mentioned_as_a_word(text, subject, mentioned):
    assert mentions(text, subject) is mentioned


@given(
    subject=st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
    tail=st.from_regex(r"[a-z0-9_-]{1,6}", fullmatch=True),
    head=st.from_regex(r"[a-z0-9_-]{1,6}", fullmatch=True),
)
def test_a_subject_inside_a_longer_identifier_is_never_mentioned(subject, tail, head):
    assert not mentions(f"{subject}{tail}, {head}{subject}", subject)
    assert mentions(f"{subject}{tail}, ({subject.upper()})", subject)


def test_the_column_is_the_subject_next_to_the_word_column_or_a_table_columns_last_part():
    assert columns_of(("customers", "customer_tier"), INVENTED) == ("customer_tier",)
    assert columns_of(("customers",), "the column `customers` of orders") == ("customers",)
    assert columns_of(("customers.customer_tier",), "it exists") == ("customer_tier",)
    assert columns_of(("config.yaml",), "the `config.yaml` column") == ("config.yaml",)
    assert columns_of(("customers",), "`customers` has rows") == ()


def test_a_stated_status_is_a_number_after_returns_status_or_http():
    assert stated_status("GET `/v1/customers/42` returns 200") == 200
    assert stated_status("it answers with status `404` for 500 customers") == 404
    assert stated_status("`/v1/customers` lists 200 customers") is None


# Verified -------------------------------------------------------------------------------------


def test_select_1_does_not_verify_a_statement_about_customer_tier():
    why = judged(INVENTED, "verified", "SELECT 1 AS one", ONE)
    assert why == (
        "the evidence does not mention customers, customer_tier: it bears on another question"
    )


def test_real_columns_of_customers_do_not_verify_the_invented_column():
    why = judged(INVENTED, "verified", INFORMATION_SCHEMA, REAL)
    assert why == "the evidence does not mention customer_tier: it bears on another question"


def test_a_query_that_names_the_column_without_returning_it_does_not_verify():
    source = INFORMATION_SCHEMA.replace("ORDER", "AND column_name = 'customer_tier' ORDER")
    empty = query_result_payload(columns=["column_name"], rows=[])
    why = judged(INVENTED, "verified", source, empty)
    assert why == "the query's rows do not name the column customer_tier, so they do not show it"


def test_rows_naming_the_column_verify_its_existence():
    assert judged(INVENTED, "verified", INFORMATION_SCHEMA, WITH_TIER) is None


def test_about_a_table_column_is_verified_by_a_query_of_the_table_listing_the_column():
    statement = "the discount reads each customer's points"
    about = ["customers.loyalty_points"]
    assert judged(statement, "verified", INFORMATION_SCHEMA, REAL, about=about) is None
    why = judged(statement, "verified", INFORMATION_SCHEMA, REAL, about=["customers.tier"])
    assert why == "the evidence does not mention customers.tier: it bears on another question"


def test_a_claim_with_no_subject_is_never_settled():
    for verdict in ("verified", "refuted"):
        assert judged("the tests pass", verdict, "pytest -q", None, kind="test_run") == NO_SUBJECT


def test_a_test_run_verifies_tests_pass_only_with_exit_code_0():
    statement = "`tests/test_discounts.py` passes"
    command = "pytest -q tests/test_discounts.py"

    def run(code):
        return test_run_payload(command=command, exit_code=code, output_sha256="0" * 64)

    assert judged(statement, "verified", command, run(0), kind="test_run") is None
    assert judged(statement, "verified", command, run(1), kind="test_run") == (
        "the command exits with 1, not 0: the tests do not pass"
    )
    assert judged(statement, "refuted", command, run(1), kind="test_run") is None
    assert judged(statement, "refuted", command, run(0), kind="test_run") == (
        "the command exits with 0: the tests pass, so it does not refute the claim"
    )


def test_an_http_exchange_must_answer_the_status_the_claim_states():
    url = "https://api.example.com/v1/customers/42"
    statement = "`/v1/customers/42` returns 200"

    def fetched(status):
        return http_exchange_payload(method="GET", url=url, status=status, body_sha256="0" * 64)

    assert judged(statement, "verified", url, fetched(200), kind="http_exchange") is None
    assert judged(statement, "verified", url, fetched(404), kind="http_exchange") == (
        "the response status is 404, not the 200 the claim states"
    )
    assert judged(statement, "refuted", url, fetched(404), kind="http_exchange") is None
    assert judged(statement, "refuted", url, fetched(200), kind="http_exchange") == (
        "the response status is 200, as the claim states, so it does not refute it"
    )
    # No status stated: the URL is what it must mention.
    assert (
        judged("`/v1/customers/42` has a tier", "verified", url, fetched(404), kind="http_exchange")
        is None
    )


def test_the_payloads_keys_are_not_mentions():
    url = "https://api.example.com/v1/customers/42"
    payload = http_exchange_payload(method="GET", url=url, status=200, body_sha256="0" * 64)
    why = judged("the `status` config key is set", "verified", url, payload, kind="http_exchange")
    assert why == "the evidence does not mention status: it bears on another question"


# Refuted --------------------------------------------------------------------------------------


def test_the_seeds_information_schema_query_refutes_the_invented_column():
    assert judged(INVENTED, "refuted", INFORMATION_SCHEMA, REAL) is None
    about = ["customers.customer_tier"]
    assert (
        judged("the discount reads the tier", "refuted", INFORMATION_SCHEMA, REAL, about=about)
        is None
    )


def test_a_refutation_by_evidence_mentioning_no_subject_does_not_refute():
    why = judged(INVENTED, "refuted", "SELECT count(*) AS n FROM orders", ONE)
    assert why == (
        "the evidence mentions none of the claim's subjects (customers, customer_tier): "
        "it bears on another question"
    )


def test_rows_naming_the_column_do_not_refute_its_existence():
    why = judged(INVENTED, "refuted", INFORMATION_SCHEMA, WITH_TIER)
    assert why == "the query's rows name the column customer_tier, so they do not show it missing"


def test_rows_of_a_query_that_does_not_read_the_schema_do_not_show_a_column_missing():
    count = query_result_payload(columns=["n"], rows=[[3]])
    why = judged(INVENTED, "refuted", "SELECT count(*) AS n FROM customers", count)
    assert why == (
        "the query does not read the schema (information_schema.columns, pragma_table_info): "
        "rows without the column do not show it missing"
    )
    pragma = "SELECT name FROM pragma_table_info('customers')"
    assert judged(INVENTED, "refuted", pragma, REAL) is None


def test_a_query_that_fails_on_the_column_refutes_it():
    assert judged(INVENTED, "refuted", "SELECT customer_tier FROM customers", None) is None


def test_a_negative_existence_claim_is_settled_by_no_query_either_way():
    statement = "`customers` has no `customer_tier` column"
    expected = (
        "the claim reads as a negative ('no'): a query's rows settle only that a column is "
        "there; a reviewer may settle this one"
    )
    assert judged(statement, "verified", INFORMATION_SCHEMA, WITH_TIER) == expected
    assert judged(statement, "refuted", INFORMATION_SCHEMA, REAL) == expected
    # A name is not a word of the statement.
    assert (
        judged("the `no_tier` column exists on `customers`", "refuted", INFORMATION_SCHEMA, REAL)
        is None
    )


def test_a_claim_that_tests_fail_is_settled_by_no_exit_code_either_way():
    command = "pytest -q tests/test_gold.py"
    failed = test_run_payload(command=command, exit_code=1, output_sha256="0" * 64)
    expected = (
        "the claim speaks of failing ('fails'): an exit code settles only that tests pass; "
        "a reviewer may settle this one"
    )
    for verdict in ("verified", "refuted"):
        assert (
            judged("`test_gold.py` fails on main", verdict, command, failed, kind="test_run")
            == expected
        )


def test_a_literal_row_does_not_show_a_column_is_there():
    literal = query_result_payload(columns=["'customer_tier'"], rows=[["customer_tier"]])
    why = judged(INVENTED, "verified", "SELECT 'customer_tier' FROM customers", literal)
    assert why == (
        "the query does not read the schema (information_schema.columns, pragma_table_info): "
        "rows that name the column do not show it is there (they may be its own words)"
    )


@pytest.mark.parametrize(
    "source",
    [
        "SELECT 1 -- customers.customer_tier",
        "SELECT 1 /* customers customer_tier */",
        "SELECT 1 AS customer_tier, 2 AS customers",
    ],
)
def test_a_subject_only_in_a_comment_or_a_column_alias_is_not_mentioned(source):
    one = query_result_payload(columns=["x"], rows=[[1]])
    why = judged("The discount reads `customers.customer_tier`", "verified", source, one)
    assert (
        why == "the evidence does not mention customers.customer_tier: it bears on another question"
    )


# What a careless agent's own words in its evidence mention: nothing -----------------------------

VALUE = "every customer has a `customer_tier` value"


@pytest.mark.parametrize(
    "source",
    [
        "SELECT 1 AS customer_tier",
        'SELECT 1 AS "customer_tier"',
        "SELECT 1 AS [customer_tier]",
        "SELECT 1 customer_tier",
        "SELECT id AS customer_tier FROM customers",
        "SELECT id FROM customers customer_tier",
        "SELECT id FROM customers WHERE 'customer_tier' <> ''",
        "SELECT id FROM customers -- customer_tier",
    ],
)
def test_a_querys_aliases_literals_and_comments_mention_nothing(source):
    payload = query_result_payload(columns=["customer_tier"], rows=[[1]])
    assert judged(VALUE, "verified", source, payload) == (
        "the evidence does not mention customer_tier: it bears on another question"
    )


def test_a_query_that_names_the_column_itself_mentions_it():
    payload = query_result_payload(columns=["customer_tier"], rows=[["gold"]])
    assert judged(VALUE, "verified", "SELECT customer_tier FROM customers", payload) is None
    aliased = "SELECT c.customer_tier AS tier FROM customers c"
    assert judged(VALUE, "verified", aliased, payload) is None


def test_a_literal_in_a_query_of_the_schema_still_names_its_table():
    statement = "`customers.customer_tier` exists"
    assert judged(statement, "refuted", INFORMATION_SCHEMA, REAL) is None


def test_a_schema_query_filtering_the_column_out_does_not_refute_it():
    statement = "the `customers.id` column exists"
    source = "SELECT name FROM pragma_table_info('customers') WHERE name != 'id'"
    payload = query_result_payload(columns=["name"], rows=[["name"], ["email"]])
    assert judged(statement, "refuted", source, payload) == (
        "the query filters on id itself: rows it leaves out do not show the column missing"
    )
    looked_for = "SELECT name FROM pragma_table_info('customers') WHERE name = 'customer_tier'"
    none = query_result_payload(columns=["name"], rows=[])
    assert judged(INVENTED, "refuted", looked_for, none) is None


def test_a_urls_fragment_is_never_sent_so_it_mentions_nothing():
    statement = "`/missing` returns `200`"
    url = "http://127.0.0.1:8183/status#/missing"
    payload = http_exchange_payload(method="GET", url=url, status=200, body_sha256="0" * 64)
    assert judged(statement, "verified", f"GET {url}", payload, kind="http_exchange") == (
        "the evidence does not mention /missing: it bears on another question"
    )
