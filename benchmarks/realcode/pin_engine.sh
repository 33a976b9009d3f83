#!/bin/sh
# Pin the engine for a measurement: `git archive REV cpu2gpu runtime` under /tmp/cpu2gpu-realcode/engine-SHA12
# (runtime/ as cpu2gpu/runtime, as the installed package maps it), and an executable
# /tmp/cpu2gpu-realcode/bin-SHA12/cpu2gpu that puts that copy first on sys.path and on PYTHONPATH, so that
# verify's and migrate's child processes (python -m cpu2gpu.runtime) import it too. Prints the executable's path.
#
#   benchmarks/realcode/pin_engine.sh HEAD        # then: migrate_run.py --tool <printed path>
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHA=$(git -C "$ROOT" rev-parse "${1:-HEAD}")
S=$(printf %.12s "$SHA")
D=/tmp/cpu2gpu-realcode/engine-$S
B=/tmp/cpu2gpu-realcode/bin-$S
if [ ! -d "$D/cpu2gpu" ]; then
    mkdir -p "$D"
    git -C "$ROOT" archive "$SHA" cpu2gpu runtime | tar -x -C "$D"
    mv "$D/runtime" "$D/cpu2gpu/runtime"
    "$ROOT/.venv/bin/python" -m compileall -q "$D" >/dev/null
fi
mkdir -p "$B"
cat > "$B/cpu2gpu" <<EOF
#!/bin/sh
# cpu2gpu as committed at $SHA ($D), first on sys.path and PYTHONPATH (children included).
export PYTHONPATH="$D\${PYTHONPATH:+:\$PYTHONPATH}"
exec "$ROOT/.venv/bin/python" -c "import sys; sys.path.insert(0, '$D'); import cpu2gpu; assert cpu2gpu.__file__.startswith('$D'), cpu2gpu.__file__; sys.argv[0] = 'cpu2gpu'; from cpu2gpu.cli import main; sys.exit(main())" "\$@"
EOF
chmod +x "$B/cpu2gpu"
# a child run must import the pinned runtime
T=$(mktemp -d)
printf 'import sys\nprint("RUNTIME", sys.modules["cpu2gpu.runtime"].__file__)\n' > "$T/t.py"
if ! (cd "$T" && "$B/cpu2gpu" verify t.py --device cpu --show-output 2>&1) | grep -q "RUNTIME $D/"; then
    echo "the child run did not import $D" >&2
    rm -rf "$T"
    exit 1
fi
rm -rf "$T"
echo "$B/cpu2gpu"
