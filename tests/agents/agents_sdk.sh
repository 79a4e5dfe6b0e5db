#!/usr/bin/env bash
# The OpenAI Agents SDK (@openai/agents, pinned in tests/agents/package.json)
# against pagoda: agents_sdk.mjs runs an Agent with a zod function tool through
# OpenAIResponsesModel and OpenAIChatCompletionsModel, run() and streamed,
# the first turn's toolChoice "required". The gateway serves lib_agents.sh's
# 128k-context random-weight model (Qwen2.5 template: Hermes tool calls) as
# "local". Takes ~20 s.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/lib_agents.sh"

[[ -x $BUILD/pagoda-gateway && -x $BUILD/pagoda-mkmodel ]] || { fail "pagoda-gateway / pagoda-mkmodel not built in $BUILD"; finish; }
need_agents "the OpenAI Agents SDK"
agents_gateway local
URL=$GW_URL MODEL=local run_node_tap 300 "$AGENTS_DIR/agents_sdk.mjs"
gateway_gone
finish
