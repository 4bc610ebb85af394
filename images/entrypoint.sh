#!/bin/sh
# Entry point of both images. `docker run IMAGE run-stage ...` means `rlvr run-stage ...`
# (the contract: the rlvr CLI is the entry point), but the Airflow Helm chart and KubeRay
# pass whole commands as container args (`bash -c "exec airflow scheduler"`,
# `airflow db check-migrations`, `ray start ...`), so an argument that names a program on
# PATH is run as it is. No rlvr subcommand (sweep, run-stage, tables, ui) is such a name.
set -e
if [ "$#" -gt 0 ] && command -v "$1" >/dev/null 2>&1; then
    exec "$@"
fi
exec rlvr "$@"
