// agents_sdk.mjs — the OpenAI Agents SDK (@openai/agents, pinned in
// tests/agents/package.json) against a pagoda gateway (started by
// agents_sdk.sh): one Agent with one function tool (zod 4 parameters, an enum
// so a random-weight model's forced call is always valid), run through
// OpenAIResponsesModel (/v1/responses) and OpenAIChatCompletionsModel
// (/v1/chat/completions), each with run() and streamed. The first turn has
// toolChoice "required" and parallelToolCalls false on every turn (a random model never calls a tool by
// itself, and its free text would run to max_tokens, which the Responses
// model takes as a failed run: response.incomplete), so the second request
// carries the first call's output and makes a second call, after which
// toolUseBehavior ends the run. Checks: the tool ran twice with valid
// arguments, the run's items are call, output, call, output with matching
// call ids, the final output came back, the stream delivered events.
//
// env: URL (the gateway), MODEL
import { Agent, run, tool, setTracingDisabled, OpenAIResponsesModel, OpenAIChatCompletionsModel } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";

const { URL, MODEL } = process.env;
setTracingDisabled(true);
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: "sk-test", maxRetries: 0, timeout: 240000 });
let failed = 0;
const ok = (cond, what, detail) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) {
    failed++;
    if (detail !== undefined) console.log(`# ${JSON.stringify(detail).slice(0, 800)}`);
  }
  return cond;
};

function makeAgent(model, calls) {
  const weather = tool({
    name: "get_weather",
    description: "The weather in a city.",
    parameters: z.object({ city: z.enum(["Paris", "Oslo", "Lima"]) }),
    execute: async ({ city }) => {
      calls.push(city);
      return `pagoda-tool-ok: sunny in ${city}`;
    },
  });
  return new Agent({
    name: "weather agent",
    instructions: "Answer with the weather tool.",
    model,
    tools: [weather],
    modelSettings: { toolChoice: "required", parallelToolCalls: false, maxTokens: 256, temperature: 0.7 },
    resetToolChoice: false,
    toolUseBehavior: () => calls.length >= 2 ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: `done after ${calls.length} calls` }
      : { isFinalOutput: false, isInterrupted: undefined },
  });
}

function checkItems(what, result, calls) {
  const items = result.newItems.map((i) => i.type);
  ok(calls.length === 2 && calls.every((c) => ["Paris", "Oslo", "Lima"].includes(c)),
     `${what}: the tool ran twice with valid cities (${calls.join(", ")})`, calls);
  const pairs = [];
  for (let i = 0; i + 1 < result.newItems.length; i++) {
    const call = result.newItems[i], out = result.newItems[i + 1];
    if (call.type === "tool_call_item" && out.type === "tool_call_output_item") pairs.push([call.rawItem, out]);
  }
  ok(items.join() === "tool_call_item,tool_call_output_item,tool_call_item,tool_call_output_item" &&
     pairs.every(([c, o]) => c.name === "get_weather" && o.rawItem.callId === c.callId &&
     JSON.stringify(o.output ?? o.rawItem.output).includes("pagoda-tool-ok")) && pairs[0][0].callId !== pairs[1][0].callId,
     `${what}: items are call, output, call, output with matching, distinct call ids`, { items, pairs });
  ok(result.finalOutput === "done after 2 calls", `${what}: the final output toolUseBehavior gave`, { finalOutput: result.finalOutput, items });
}

const models = [
  ["Responses", () => new OpenAIResponsesModel(client, MODEL)],
  ["Chat Completions", () => new OpenAIChatCompletionsModel(client, MODEL)],
];
for (const [api, make] of models) {
  for (const streamed of [false, true]) {
    const what = `Agents SDK, ${api}, ${streamed ? "streamed" : "run()"}`;
    const calls = [];
    try {
      const agent = makeAgent(make(), calls);
      if (!streamed) {
        const result = await run(agent, "What is the weather in Paris?", { maxTurns: 4 });
        checkItems(what, result, calls);
      } else {
        const result = await run(agent, "What is the weather in Oslo?", { maxTurns: 4, stream: true });
        let n = 0;
        const kinds = new Set();
        for await (const ev of result) {
          n++;
          kinds.add(ev.type);
        }
        await result.completed;
        ok(n > 0 && kinds.has("raw_model_stream_event") && kinds.has("run_item_stream_event") && !result.error,
           `${what}: stream events (${n}: ${[...kinds].join(", ")})`, { error: String(result.error ?? "") });
        checkItems(what, result, calls);
      }
    } catch (e) {
      ok(false, `${what}: the run completed`, { error: String(e), status: e.status, body: e.error });
    }
  }
}
process.exit(failed ? 1 : 0);
