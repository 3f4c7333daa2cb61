#!/bin/bash
# opc.sh ROOT what N
root=$1; what=$2; n=${3:-5000}
run() { PYTHONPATH=$root PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=${TMPDIR:-/tmp}/opc.$1.out ${PYTHON:-python} $(dirname "$0")/opc.py $2 $3 >/dev/null 2>&1; grep -E '^totals:|^summary:' ${TMPDIR:-/tmp}/opc.$1.out | head -1 | awk '{print $2}'; }
a=$(run a $n $what); b=$(run b $n none)
echo "$what ($root): $(( (a - b) / n )) instr per exchange"
