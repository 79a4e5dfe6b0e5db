// lora_sdk.mjs — the official `openai` npm SDK selects a LoRA adapter by model
// name against a real gateway + worker (started by lora.sh). Prints "ok - …" /
// "not ok - …".
//
// env: URL the gateway; MODEL the adapter's name; PROMPT; N max tokens;
// WANT pagoda-run --lora's greedy text for that prompt and adapter
import OpenAI from "../js/node_modules/openai/index.mjs";
import { ok, exitCode } from "./tap.mjs";

const { URL, MODEL, PROMPT, WANT } = process.env;
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: "none", maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
ok(models.data.some((m) => m.id === MODEL), `models.list() names adapter ${MODEL}`);
const c = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: Number(process.env.N), temperature: 0 });
ok(c.model === MODEL, "the completion echoes the adapter's name");
ok(c.choices[0].text === WANT, "completions.create with the adapter's name = pagoda-run --lora");
const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
ok(s.model === MODEL && typeof s.choices[0].message.content === "string", "chat.completions.create with the adapter's name");
process.exitCode = exitCode();
