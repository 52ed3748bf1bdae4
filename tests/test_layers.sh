#!/bin/bash
# The layers run one way at link time too: every symbol a layer's archive uses
# is defined in that layer or one below it.  The include paths already stop a
# lower layer from including a higher one's headers; this catches a call
# declared by hand (an extern) or through a header shared by two layers.
#   test_layers.sh BASE.a TRANSPORTS.a ENGINE.a ALGORITHMS.a   (lowest first)
set -u
layers=("$@")
names=(base transports engine algorithms)
fail=0
defined_below() { # symbols defined in layers 0..$1
    local k
    for ((k = 0; k <= $1; k++)); do
        nm --defined-only "${layers[k]}" | awk 'NF == 3 {print $3}'
    done | sort -u
}
for ((i = 0; i < ${#layers[@]}; i++)); do
    below=$(mktemp)
    defined_below "$i" > "$below"
    # Our symbols only (coll*, COLL*); libc and friends are below everything.
    used=$(nm -u "${layers[i]}" | awk '{print $2}' | grep -E '^(coll|COLL)' | sort -u)
    for sym in $used; do
        if ! grep -qx "$sym" "$below"; then
            echo "FAIL: ${names[i]} uses $sym, defined in a layer above it"
            fail=1
        fi
    done
    rm -f "$below"
    echo "${names[i]}: $(echo "$used" | grep -c . ) of our symbols used, all from it or below"
done
exit $fail
