"""What the bench scripts share: running a tessel command whose last line is JSON, and --set options."""
import json
import subprocess


def last_json(cmd, env):
    """Runs cmd; its last line of output, as JSON. A failure raises with the tail of both streams."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def set_args(overrides):
    """["--set", k=v, ...] for the overrides given."""
    return [a for s in overrides for a in ("--set", s)]
