#!/bin/bash
# A B A B: branch point (A) against the branch (B), each with its own defaults.
# usage: ab.sh ROUNDS OUTDIR
R=$1; OUT=$2; mkdir -p $OUT
A=${A:-./bench-base}; B=${B:-./bench-new}
for r in $(seq 1 $R); do
  for n in 300000 1000000 4000000; do
    for v in A B; do
      bin=${!v}
      $bin --engine pmeh --workload load --records $n --key-size 8 --value-size 8 --threads 2 \
        --no-ceilings --csv $OUT/load-$n-$v-$r.csv > $OUT/load-$n-$v-$r.txt 2>&1
    done
  done
done
