"""The environment verify gives its runs (runtime/sandbox/environment.py): no torch needed."""

from cpu2gpu.runtime.sandbox.environment import child_environment

PARENT = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/home/me", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
          "WANDB_API_KEY": "k", "WANDB_MODE": "offline", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
          "CUDA_VISIBLE_DEVICES": "1"}


def test_by_default_the_run_inherits_everything():
    assert child_environment(PARENT, clean=False) == PARENT


def test_a_clean_environment_keeps_what_a_child_needs_and_drops_the_rest(tmp_path):
    env = child_environment(PARENT, clean=True, home=str(tmp_path / "home"))
    assert "AWS_SECRET_ACCESS_KEY" not in env and "WANDB_API_KEY" not in env
    assert {k: env[k] for k in ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")} == \
        {k: PARENT[k] for k in ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path / "home") and (tmp_path / "home").is_dir()


def test_allowed_patterns_pass_through(tmp_path):
    env = child_environment(PARENT, clean=True, allow=("WANDB_*", "HOME"), home=str(tmp_path / "h"))
    assert env["WANDB_API_KEY"] == "k" and env["WANDB_MODE"] == "offline"
    assert env["HOME"] == "/home/me"  # allowed: the user's own
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_env_allow_without_clean_env_is_an_error(tmp_path):
    from click.testing import CliRunner

    from cpu2gpu.cli import main

    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    result = CliRunner().invoke(main, ["verify", str(script), "--env-allow", "X"])
    assert result.exit_code == 2 and "--env-allow needs --clean-env" in result.output
