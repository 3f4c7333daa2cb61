"""Each redacted value of a recorded body is told apart and named for the field it fills."""

from __future__ import annotations

from proxy.record.body_secrets import BodySecret, body_secrets

CODE = "<redacted len=37 hmac:0d09d81d>"
SECRET = "<redacted len=64 hmac:3db64033>"


def test_a_form_bodys_values_are_named_for_their_decoded_field_names_and_equal_values_share_one() -> None:
    form = f"grant_type=authorization_code&code={CODE}&client%5Fsecret={SECRET}&again={CODE}"

    assert body_secrets(form, form) == {
        CODE: BodySecret("MCP_BODY_CODE", "the redacted value of body field 'code'"),
        SECRET: BodySecret("MCP_BODY_CLIENT_SECRET", "the redacted value of body field 'client_secret'"),
    }


def test_values_no_field_names_are_told_apart_by_their_order() -> None:
    text = f"not a form: {CODE} then {SECRET}"

    assert body_secrets(text, text) == {
        CODE: BodySecret("MCP_BODY_SECRET", "the first of 2 redacted values in the body that no field names"),
        SECRET: BodySecret(
            "MCP_BODY_SECRET", "the second of 2 redacted values in the body that no field names"
        ),
    }


def test_a_request_state_is_no_secret_of_the_body() -> None:
    state = "<requestState len=257 hmac:9f8e7d6c>"
    body = {"params": {"requestState": state, "key": CODE}}

    assert list(body_secrets(body, f'{{"params":{{"requestState":"{state}","key":"{CODE}"}}}}')) == [CODE]
