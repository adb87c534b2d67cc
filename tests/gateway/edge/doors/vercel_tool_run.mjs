// A multi-step tool run with the Vercel AI SDK's default `openai()` provider (the Responses API,
// `store` on: earlier assistant text goes back as `item_reference`s), against the gateway named by
// OPENAI_BASE_URL. Run by test_stateful_sdks.py; the pinned packages are imported from the
// node_modules folder HARNESS_MODULES names (deploy/install.sh installs them into .harness).
// Prints the result as JSON.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const from = (pkg) => import(pathToFileURL(join(process.env.HARNESS_MODULES, pkg, "dist/index.js")));
const { openai } = await from("@ai-sdk/openai");
const { generateText, jsonSchema, stepCountIs, streamText, tool } = await from("ai");

const weather = tool({
  description: "Weather in a city",
  inputSchema: jsonSchema({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  }),
  execute: async ({ city }) => ({ city, forecast: "sunny" }),
});

// The input item types of each request the SDK sends (what the test checks it relies on).
const sentTypes = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const body = JSON.parse(init?.body ?? "{}");
  sentTypes.push((body.input ?? []).map((item) => item.type ?? item.role));
  return realFetch(url, init);
};

// STREAM=1: streamText (the Responses stream) instead of generateText.
const run = process.env.STREAM === "1" ? streamText : generateText;
const result = run({
  model: openai(process.env.MODEL ?? "smol"),
  tools: { get_weather: weather },
  stopWhen: stepCountIs(3),
  prompt: "What is the weather in Paris?",
});
const done = process.env.STREAM === "1" ? result : await result;
console.log(
  JSON.stringify({
    text: await done.text,
    sentTypes,
    steps: (await done.steps).map((s) => ({
      text: s.text,
      toolCalls: s.toolCalls.map((c) => c.toolName),
      finishReason: s.finishReason,
    })),
  }),
);
