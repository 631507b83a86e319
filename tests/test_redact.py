import pytest

from specwatch.redact import REDACTED, redact_argv, redact_env, redact_text, redact_url, redact_urls, secret_values


def test_env_values_with_secret_names_are_hidden() -> None:
    env = {"HF_TOKEN": "hf_abc", "OPENAI_API_KEY": "sk-1", "db_password": "pw", "MY_SECRET": "s",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED, "db_password": REDACTED,
                               "MY_SECRET": REDACTED, "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_argv_flag_values_are_hidden_in_both_spellings() -> None:
    argv = ["python", "-m", "x", "--api-key", "sk-1", "--hf-token=hf_abc", "--port", "8000", "TOKEN=t"]
    assert redact_argv(argv) == ["python", "-m", "x", "--api-key", REDACTED, f"--hf-token={REDACTED}",
                                 "--port", "8000", f"TOKEN={REDACTED}"]


def test_secret_values_are_scrubbed_from_free_text() -> None:
    text = "boot failed: invalid token hf_abc for repo"
    redacted = redact_text(text, secret_values({"HF_TOKEN": "hf_abc", "PORT": "8000"}))
    assert redacted == f"boot failed: invalid token {REDACTED} for repo"


def test_secrets_inside_a_shell_string_are_hidden_and_found() -> None:
    argv = ["bash", "-c", "python -m srv --port 8000 --api-key 'sk-1 2' --hf-token=hf_abc DB_PASSWORD=pw12 "
            "--max-num-batched-tokens 8192 --tokenizer /models/tok"]
    assert redact_argv(argv)[2] == (f"python -m srv --port 8000 --api-key {REDACTED} --hf-token={REDACTED} "
                                    f"DB_PASSWORD={REDACTED} --max-num-batched-tokens 8192 --tokenizer /models/tok")
    found = secret_values({"MY_SECRET": "s3cr3t", "PORT": "8000"}, [*argv, "--api-key", "sk-2345"])
    assert set(found) == {"s3cr3t", "sk-2345", "hf_abc", "sk-1 2", "pw12"}
    assert [len(v) for v in found] == sorted((len(v) for v in found), reverse=True)  # none half-replaced


def test_short_values_are_not_replaced_in_free_text() -> None:
    # a one-character "secret" would turn every such character of a log into ***
    assert secret_values({"HF_TOKEN": "1"}) == []


@pytest.mark.parametrize("url, shown", [
    ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/***"),
    ("https://example.org/hook?token=abc123", "https://example.org/***"),
    ("https://user:pass@example.org:8443/", "https://example.org:8443/***"),
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ("http://[::1", "***"),  # not a URL at all: nothing of it is shown
])
def test_a_webhook_url_is_shown_without_its_path_query_or_user(url: str, shown: str) -> None:


    assert redact_url(url) == shown
    assert redact_urls(f"POST {url} failed: 404") == f"POST {shown} failed: 404"
