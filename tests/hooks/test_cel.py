"""hooks.cel: compiling `when` expressions and evaluating them against a call."""

import pytest

from hooks.cel import compile_expression, evaluate

CALL = {
    "tool": "oa__purchase_pay",
    "args": {"amount": 5000, "vendor": {"name": "acme", "country": "FR"}, "items": [{"sku": "a", "qty": 2}]},
    "user": "ou_abc",
    "session": {"id": "s1"},
    "agent": "purchasing-bot",
    "metadata": {"read_only": False},
}


def test_it_evaluates_an_expression_over_nested_args():
    program = compile_expression("args.amount > 1000 && args.vendor.country == 'FR' && args.items[0].qty == 2")

    assert evaluate(program, CALL) is True


def test_it_evaluates_to_false_when_the_expression_does_not_hold():
    assert evaluate(compile_expression("tool.startsWith('crm__')"), CALL) is False


def test_it_lets_has_test_for_a_missing_key():
    assert evaluate(compile_expression("has(args.discount) && args.discount > 0"), CALL) is False


def test_it_accepts_every_hook_variable():
    program = compile_expression(
        "tool != '' && size(args) > 0 && user == 'ou_abc' && session.id == 's1'"
        " && agent == 'purchasing-bot' && !metadata.read_only"
    )

    assert evaluate(program, CALL) is True


def test_it_accepts_names_bound_by_comprehension_macros():
    program = compile_expression("args.items.exists(item, item.qty > 1) && args.items.all(i, i.sku != '')")

    assert evaluate(program, CALL) is True


def test_it_caches_compiled_programs():
    assert compile_expression("user == 'x'") is compile_expression("user == 'x'")


def test_it_refuses_a_syntax_error_with_its_column():
    with pytest.raises(ValueError) as excinfo:
        compile_expression("args.amount >")

    assert str(excinfo.value) == "invalid CEL expression: column 14: mismatched input '<EOF>'"


def test_it_names_the_line_of_a_syntax_error_past_the_first():
    with pytest.raises(ValueError, match="line 2, column 6"):
        compile_expression("args.amount > 1\n && (")


def test_it_refuses_an_unknown_identifier():
    with pytest.raises(ValueError) as excinfo:
        compile_expression("amount > 1000")

    assert str(excinfo.value) == (
        "unknown identifier 'amount'; a `when` expression may use tool, args, user, session, agent, metadata"
    )


def test_it_names_every_unknown_identifier():
    with pytest.raises(ValueError, match="unknown identifiers 'request', 'tools'"):
        compile_expression("tools == 'a' || request.x == 1")


def test_it_does_not_take_a_macro_lookalike_inside_a_string_as_a_binding():
    with pytest.raises(ValueError, match="unknown identifier 'x'"):
        compile_expression("tool == '.all(x, ' && x")


def test_it_refuses_a_result_that_is_not_a_bool():
    program = compile_expression("args.amount + 1")

    with pytest.raises(ValueError) as excinfo:
        evaluate(program, CALL)

    assert str(excinfo.value) == "evaluating 'args.amount + 1': must give true or false, got int 5001"


def test_it_explains_a_missing_key():
    with pytest.raises(ValueError) as excinfo:
        evaluate(compile_expression("args.discount > 0"), CALL)

    assert str(excinfo.value) == (
        "evaluating 'args.discount > 0': no such key 'discount' (test for it with has(...) first)"
    )


def test_it_turns_a_type_mismatch_into_a_value_error():
    with pytest.raises(ValueError, match="^evaluating 'tool \\+ 1 == 2': Unsupported operation"):
        evaluate(compile_expression("tool + 1 == 2"), CALL)
