#!/usr/bin/env bash
# The Airflow demo: run examples/airflow_etl_dag.py with `airflow dags test` on the local backend
# (gateways are local processes, the two "regions" are folders), in a throwaway AIRFLOW_HOME with
# SQLite, and print the transfer summary. Nothing outside the temporary folder is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BIN="$ROOT/.venv/bin"
[ -x "$BIN/airflow" ] || { echo "run 'make venv' first (no $BIN/airflow)" >&2; exit 1; }

WORK="$(mktemp -d -t skyplane-airflow-demo-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
export AIRFLOW_HOME="$WORK/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$WORK/dags"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$WORK/airflow/airflow.db"
export SKYPLANE_OPS_HOME="$WORK/skyplane-home"
export SKYPLANE_EXAMPLE_DIR="$WORK/data"
export AIRFLOW_CONN_SKYPLANE_DEFAULT="{\"conn_type\": \"skyplane\", \"extra\": {\"backend\": \"local\", \"work_dir\": \"$WORK/skyplane-work\"}}"
mkdir -p "$AIRFLOW__CORE__DAGS_FOLDER"
cp examples/airflow_etl_dag.py "$AIRFLOW__CORE__DAGS_FOLDER/"

echo "== airflow db migrate (temporary home $AIRFLOW_HOME)"
"$BIN/airflow" db migrate >"$WORK/migrate.log" 2>&1 || { cat "$WORK/migrate.log"; exit 1; }

echo "== airflow dags test skyplane_etl_example"
if ! "$BIN/airflow" dags test skyplane_etl_example >"$WORK/dags-test.log" 2>&1; then
  tail -n 60 "$WORK/dags-test.log"
  exit 1
fi
grep -E "\[DAG TEST\] end task|Marking run" "$WORK/dags-test.log" | sed -E 's/^.*\[(info|warning) *\] //; s/ \[airflow[^]]*\].*$//'

echo "== transfer summary (XCom of replicate.transfer)"
"$BIN/python" - <<'EOF'
import json

from sqlalchemy import select

from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

with create_session() as session:
    rows = session.scalars(
        select(XComModel)
        .where(XComModel.dag_id == "skyplane_etl_example", XComModel.key == "return_value")
        .order_by(XComModel.timestamp)
    ).all()
    values = {row.task_id: row.value for row in rows}


def load(value):
    return json.loads(value) if isinstance(value, str) else value


summary = load(values["replicate.transfer"])
check = load(values["check_replica"])
for key in ("transfer_id", "src", "dst", "objects", "bytes", "seconds", "gbps", "route",
            "predicted_gbps", "predicted_cost_usd", "actual_cost_usd", "chunks", "plan_uri"):
    print(f"  {key:>18}: {summary.get(key)}")
print(f"  {'verification':>18}: {summary['verification'].get('status')} "
      f"({summary['verification'].get('method')})")
print(f"  {'XCom size':>18}: {len(json.dumps(summary))} bytes")
print(f"  {'replica check':>18}: {check}")
EOF
grep -q '"status": "success"\|state=success\|successful' "$WORK/dags-test.log" && echo "== DAG run successful"
