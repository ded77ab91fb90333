#!/bin/bash
R=$1; OUT=$2; mkdir -p $OUT
A=${A:-./bench-base}; B=${B:-./bench-new}
for r in $(seq 1 $R); do
  for v in A B; do
    bin=${!v}
    $bin --preset peers-8b --engine pmeh --records 1000000 --no-ceilings \
      --csv $OUT/peers-$v-$r.csv > $OUT/peers-$v-$r.txt 2>&1
  done
done
