#!/usr/bin/env bash
# The framework alone (issue 34): `shipgate` installed from this repository into a fresh
# virtualenv, with its own dependencies and nothing else, does a new project's whole cycle:
#   pv init -> pv validate -> gates check GATE-EXAMPLE-001 -> gates audit
# and neither torch, numpy, matplotlib nor the reference trainer can be imported there.
# Installs from a copy of the files git sees (the working tree, not HEAD), so the build
# writes nothing into the repository. Needs the package registry (ruamel.yaml, jsonschema,
# pytest, setuptools). Run by `make framework-alone` and CI (.ci/run).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/shipgate-framework-alone.XXXXXX")
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
mkdir "$work/src" "$work/project"
# tracked and untracked-but-not-ignored files that still exist (a deleted one is skipped)
git -C "$repo" ls-files -z --cached --others --exclude-standard \
  | (cd "$repo" && while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done) \
  | tar -C "$repo" --null -T - -cf - | tar -C "$work/src" -xf -
"$python" -m venv "$work/venv"
bin="$work/venv/bin"
# (grep: this machine's pip configuration names find-links folders it may lack; say nothing of them)
"$bin/python" -m pip install --quiet --disable-pip-version-check "$work/src" 2>&1 \
  | { grep -v "^WARNING: Location '.*' is ignored" || true; }

echo "framework-alone: installed $("$bin/python" -m pip list --format=freeze --disable-pip-version-check | tr '\n' ' ')"
cd "$work/project"   # an empty directory: `python -c` looks in the current one first
for module in torch numpy matplotlib safetensors trainer; do
  if "$bin/python" -c "import $module" 2>/dev/null; then
    echo "framework-alone: '$module' is importable with only the framework installed" >&2
    exit 1
  fi
done

git init -q . && git config user.email ci@example.invalid && git config user.name ci
printf '[project]\nname = "adopter"\nversion = "0.0.1"\n' > pyproject.toml
"$bin/pv" init
git add -A && git commit -qm "pv init"
"$bin/pv" validate contracts/*.yaml
"$bin/gates" check GATE-EXAMPLE-001
"$bin/gates" audit --files contracts/*.yaml --out "$work/audit.json"
echo "framework-alone: pv init, pv validate, gates check and gates audit ran with no torch ($(( $(date +%s) - start )) s)"
