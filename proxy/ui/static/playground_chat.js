// The Playground's text kinds: a chat (`POST /v1/chat/completions`) and a text completion
// (`POST /v1/completions`), both streamed. While the model starts, what swapd says about it shows:
// its loading progress (swapd's `sendLoadingState` chunks, `id: "swapd-loading"`, as
// `reasoning_content` deltas) or, without that setting, the model's state from the event stream.
// Each answer has Stop while it streams, Retry after, and its timings underneath.

import { el } from "./dom.js";
import { sse, Timing } from "./openai_stream.js";
import { bodyOptions, errorOf, options, optionsPanel, timingsLine, waitingLine } from "./playground_common.js";

const LOADING_ID = "swapd-loading";

// One answer's place in the page: its parts appear as the stream brings them. The answer's text
// goes into `text`, shown inside `content` (the same element, unless the kind frames it).
function answerView(model, content = null, text = null) {
  const node = el("article", { class: "msg assistant", "data-role": "answer", "data-state": "waiting" },
    el("div", { class: "who", text: model }));
  text = text || el("div", { class: "text", "data-role": "text" });
  content = content || text;
  const timings = el("div", { class: "timings", "data-role": "timings" });
  const actions = el("div", { class: "actions" });
  node.append(content, timings, actions);
  let loading = null;
  let thinking = null;
  const block = (role, title, open) => {
    const pre = el("pre", {});
    const details = el("details", { "data-role": role, open }, el("summary", { text: title }), pre);
    node.insertBefore(details, content);
    return { details, pre };
  };
  return {
    node, text, content, timings, actions,
    loading(chunk) {
      if (!loading) loading = block("loading", "loading the model", true);
      loading.pre.textContent += chunk;
      loading.pre.scrollTop = loading.pre.scrollHeight;
    },
    loaded() { if (loading) loading.details.open = false; },
    thinking(chunk) {
      if (!thinking) thinking = block("thinking", "thinking", false);
      thinking.pre.textContent += chunk;
    },
    error(message) {
      node.insertBefore(el("div", { class: "error", "data-role": "error", text: message }), timings);
    },
  };
}

// While an answer grows, the page stays at its end if it was there (a reader who scrolled up
// to read is left where they are).
function atEnd() {
  const page = document.scrollingElement;
  return page.scrollHeight - page.scrollTop - page.clientHeight < 40;
}

function grow(add) {
  const stick = atEnd();
  add();
  if (stick) document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight;
}

// Sends one streamed request and draws its answer into `view`; `pick(event)` gives the text
// a chunk adds. Resolves to the answer's text and how it ended: `done`, `stopped` or `error`.
async function generate(path, body, view, controller, pick) {
  const timing = new Timing();
  const waiting = waitingLine(body.model);
  view.node.insertBefore(waiting.node, view.content);
  let text = "";
  let ended = "done";
  let finish = null; // the choice's finish_reason, once one came
  const tokens = () => {
    if (timing.first === null) { waiting.stop(); view.loaded(); view.node.dataset.state = "streaming"; }
    timing.token();
  };
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    timing.response();
    if (!response.ok) throw new Error(await errorOf(response));
    const type = response.headers.get("Content-Type") || "";
    if (!type.includes("text/event-stream")) {
      // A server that does not stream answers with the whole thing at once.
      const data = await response.json();
      timing.figures(data);
      const choice = data.choices && data.choices[0];
      if (choice && choice.finish_reason) finish = choice.finish_reason;
      const whole = pick(data, true);
      if (whole) { tokens(); text += whole; view.text.textContent = text; }
    } else {
      for await (const event of sse(response)) {
        if (event.error) {
          const e = event.error;
          throw new Error(typeof e === "string" ? e : `${e.code || ""} ${e.message || JSON.stringify(e)}`.trim());
        }
        const delta = (event.choices && event.choices[0] && event.choices[0].delta) || {};
        if (event.id === LOADING_ID) {
          if (delta.reasoning_content) view.loading(delta.reasoning_content);
          timing.loading();
          continue;
        }
        timing.figures(event);
        const reason = event.choices && event.choices[0] && event.choices[0].finish_reason;
        if (reason) finish = reason;
        if (delta.reasoning_content) { tokens(); grow(() => view.thinking(delta.reasoning_content)); }
        const piece = pick(event, false);
        if (piece) { tokens(); text += piece; grow(() => view.text.append(piece)); }
      }
    }
  } catch (err) {
    if (controller.signal.aborted) {
      ended = "stopped";
      view.error("stopped");
    } else {
      ended = "error";
      view.error(err.message || String(err));
    }
  } finally {
    waiting.stop();
    view.loaded();
    timing.done();
  }
  view.node.dataset.state = ended;
  view.timings.replaceChildren(...timingsLine(timing.summary(), ended === "done" ? finish || "" : null));
  return { text, ended };
}

function composerKeys(textarea, send, stop) {
  textarea.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    if (e.key === "Escape") stop();
  });
}

// The chat: `model()` names the model picked now.
export function chat(model) {
  const messages = []; // {role, content}: the conversation so far, the system prompt apart
  let controller = null;
  let lastAnswer = null; // {view, index}: the answer Retry redoes
  const list = el("div", { class: "messages", "data-role": "messages" });
  const prompt = el("textarea", {
    "data-role": "prompt", rows: "3", "aria-label": "message",
    placeholder: "Message: Enter sends, Shift+Enter starts a new line, Esc stops",
  });
  const sendButton = el("button", { class: "primary", "data-action": "send", text: "Send" });
  const stopButton = el("button", { class: "danger", "data-action": "stop", text: "Stop", hidden: true });
  const newButton = el("button", { "data-action": "new", text: "New chat" });

  const busy = (on) => {
    sendButton.disabled = on;
    stopButton.hidden = !on;
    for (const b of list.querySelectorAll('[data-action="retry"]')) b.remove();
  };

  async function answer() {
    const picked = model();
    if (!picked) return;
    const view = answerView(picked);
    list.append(view.node);
    view.node.scrollIntoView({ block: "nearest" });
    controller = new AbortController();
    busy(true);
    let text = "";
    try {
      const system = options().system.trim();
      const body = {
        model: picked,
        messages: system ? [{ role: "system", content: system }, ...messages] : [...messages],
        stream: true,
        stream_options: { include_usage: true },
        ...bodyOptions(),
      };
      ({ text } = await generate("/v1/chat/completions", body, view, controller, (event, whole) => {
        const choice = event.choices && event.choices[0];
        if (!choice) return "";
        return whole ? (choice.message && choice.message.content) || "" : (choice.delta && choice.delta.content) || "";
      }));
    } catch (err) {
      // The options could not make a request (extra parameters that are not JSON): nothing sent.
      view.error(err.message);
      view.node.dataset.state = "error";
    }
    controller = null;
    if (text) messages.push({ role: "assistant", content: text });
    lastAnswer = { view, kept: Boolean(text) };
    busy(false);
    view.actions.append(el("button", { "data-action": "retry", text: "Retry", onclick: retry }));
  }

  function send() {
    const text = prompt.value.trim();
    if (!text || controller || !model()) return;
    prompt.value = "";
    messages.push({ role: "user", content: text });
    list.append(el("article", { class: "msg user", "data-role": "question" },
      el("div", { class: "who", text: "you" }), el("div", { class: "text", text })));
    answer();
  }

  // The last answer again: it is dropped from the conversation and asked for anew.
  function retry() {
    if (controller || !lastAnswer) return;
    if (lastAnswer.kept) messages.pop();
    lastAnswer.view.node.remove();
    lastAnswer = null;
    answer();
  }

  function stop() { if (controller) controller.abort(); }

  sendButton.addEventListener("click", send);
  stopButton.addEventListener("click", stop);
  newButton.addEventListener("click", () => {
    stop();
    messages.length = 0;
    lastAnswer = null;
    list.replaceChildren();
    prompt.focus();
  });
  composerKeys(prompt, send, stop);
  return {
    node: el("div", { class: "chat", "data-kind-view": "chat" },
      optionsPanel("chat"),
      list,
      el("div", { class: "composer" }, prompt, el("div", { class: "actions" }, sendButton, stopButton, newButton))),
    stop,
    focus: () => prompt.focus(),
  };
}

// A text completion: the prompt, continued by the model (for base models, and to see a
// template-free answer).
export function completion(model) {
  let controller = null;
  const prompt = el("textarea", {
    "data-role": "prompt", rows: "4", "aria-label": "prompt",
    placeholder: "Text to continue: Ctrl+Enter generates, Esc stops",
  });
  const out = el("div", { "data-role": "result", class: "result" });
  const goButton = el("button", { class: "primary", "data-action": "send", text: "Generate" });
  const stopButton = el("button", { class: "danger", "data-action": "stop", text: "Stop", hidden: true });

  async function go() {
    const picked = model();
    if (controller || !picked || !prompt.value) return;
    const text = prompt.value;
    const generated = el("span", { class: "gen", "data-role": "text" });
    const view = answerView(picked, el("div", { class: "completion-out" }, el("span", { text }), generated), generated);
    out.replaceChildren(view.node);
    controller = new AbortController();
    goButton.disabled = true;
    stopButton.hidden = false;
    try {
      const body = { model: picked, prompt: text, stream: true, stream_options: { include_usage: true }, ...bodyOptions() };
      await generate("/v1/completions", body, view, controller, (event, whole) => {
        const choice = event.choices && event.choices[0];
        return (choice && choice.text) || "";
      });
    } catch (err) {
      view.error(err.message);
      view.node.dataset.state = "error";
    }
    controller = null;
    goButton.disabled = false;
    stopButton.hidden = true;
    view.actions.append(el("button", { "data-action": "retry", text: "Retry", onclick: go }));
  }

  function stop() { if (controller) controller.abort(); }
  goButton.addEventListener("click", go);
  stopButton.addEventListener("click", stop);
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); go(); }
    if (e.key === "Escape") stop();
  });
  return {
    node: el("div", { class: "chat", "data-kind-view": "completion" },
      optionsPanel("completion"),
      prompt,
      el("div", { class: "actions" }, goButton, stopButton),
      out),
    stop,
    focus: () => prompt.focus(),
  };
}
