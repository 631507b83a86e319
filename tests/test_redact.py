from specwatch.redact import REDACTED, redact_argv, redact_env, redact_text


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
    redacted = redact_text(text, {"HF_TOKEN": "hf_abc", "PORT": "8000"})
    assert redacted == f"boot failed: invalid token {REDACTED} for repo"
