#!/usr/bin/env bash
# The soak (tests/soak/soak.sh) in its short form for `make test`: 20 s of mixed traffic
# after a 5 s warm-up, with every end-of-run check. For a long run:
#   SOAK_SECONDS=600 bash tests/soak/soak.sh
SOAK_SECONDS=${SOAK_SHORT_SECONDS:-20} WARM_SECONDS=${WARM_SECONDS:-5} \
  exec bash "$(dirname "$0")/../soak/soak.sh"
