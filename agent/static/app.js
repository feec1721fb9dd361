// Kokoro voice agent page: POST /invocations, read the SSE stream, show the text as it arrives and
// play the PCM chunks gaplessly with Web Audio (each chunk starts exactly where the previous ends).
// #timeline draws the reply on one time axis (seconds since Ask): when text arrived, when each chunk
// plays, the gaps a listener heard and first audio. Every scheduled chunk is also listed in #chunks
// (data-seq, data-start, data-duration) and window.kokoroAgent holds the same numbers. Stop stays
// active, and the state "playing", until the last scheduled audio has been heard. A dropped TTS connection (voice_lost / voice_restored
// events) shows in #voice-status while the text keeps streaming. A machine too slow for real time
// shows in #slow: the gaps playback waited for audio (window.kokoroAgent.gapS) and the TTS server's
// own warnings (its /ping, relayed by the agent at /tts-status), each with what to do.
"use strict";

const $ = (id) => document.getElementById(id);
const state = (window.kokoroAgent = {
  scheduled: [], events: 0, firstAudioMs: null, firstTextMs: null, voice: [], gapS: 0, ttsWarnings: [],
  textS: [], gaps: [], t0: 0,
});
let audioCtx = null;
let nextStart = 0;
let controller = null;
let playedOut = null; // the timer that ends "playing" once the last scheduled audio has been heard
const LEAD_S = 0.05; // scheduling headroom so the first chunk is not started in the past
const GAP_WARN_S = 0.5; // gaps in one reply from which the page says the machine is too slow
const ADVICE = "What to do: give the TTS server more CPU threads (KOKORO_THREADS / --threads), serve several " +
  "listeners in its concurrent mode (KOKORO_MODE=concurrent), or run it on a GPU (--backend torch --device cuda).";

function setState(s) {
  document.body.dataset.state = s;
  $("state").textContent = s;
}

// The TTS connection as the page last heard of it: ok, lost (reconnecting), restored, unavailable.
function setVoice(status, text) {
  $("voice-status").dataset.status = status;
  $("voice-status").textContent = text;
  state.voice.push(status);
}

// The slow-machine warning: what playback waited for, and what the TTS server says of itself.
function showSlow() {
  const lines = [];
  if (state.gapS >= GAP_WARN_S) {
    lines.push(`Playback waited ${state.gapS.toFixed(1)} s for audio in this reply: speech is synthesised ` +
      "slower than real time.");
  }
  for (const w of state.ttsWarnings) lines.push(`TTS server: ${w.message}. What to do: ${w.advice}.`);
  if (lines.length && !state.ttsWarnings.length) lines.push(ADVICE);
  $("slow").hidden = lines.length === 0;
  $("slow").textContent = lines.join("\n");
}

async function checkTts() {
  try {
    const resp = await fetch("/tts-status");
    const body = await resp.json();
    state.ttsWarnings = body.warnings || [];
  } catch (err) {
    state.ttsWarnings = [];
  }
  showSlow();
}

function pcmToFloat(b64) {
  const bin = atob(b64);
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const out = new Float32Array(bin.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

// Seconds since Ask, now.
const sinceAsk = () => (performance.now() - state.t0) / 1000;

function schedule(samples, sampleRate, seq, text) {
  const buffer = audioCtx.createBuffer(1, samples.length, sampleRate);
  buffer.copyToChannel(samples, 0);
  const source = audioCtx.createBufferSource();
  source.buffer = buffer;
  source.connect(audioCtx.destination);
  const earliest = audioCtx.currentTime + LEAD_S;
  const toAsk = sinceAsk() - audioCtx.currentTime; // audio-clock time + this = seconds since Ask
  if (nextStart > 0 && earliest > nextStart) { // the previous chunk ended before this one arrived: a gap
    const before = state.gapS;
    state.gapS += earliest - nextStart;
    state.gaps.push({ start: +(nextStart + toAsk).toFixed(4), end: +(earliest + toAsk).toFixed(4) });
    if (state.gapS >= GAP_WARN_S) {
      if (before < GAP_WARN_S) checkTts(); // once per reply: the server's own figures and advice
      else showSlow();
    }
  }
  const start = Math.max(nextStart, earliest);
  source.start(start);
  nextStart = start + buffer.duration;
  const item = { seq, start: +start.toFixed(4), duration: +buffer.duration.toFixed(4), samples: samples.length,
    plays: +(start + toAsk).toFixed(4), arrived: +sinceAsk().toFixed(4) };
  state.scheduled.push(item);
  const li = document.createElement("li");
  li.dataset.seq = seq;
  li.dataset.start = item.start;
  li.dataset.duration = item.duration;
  li.textContent = `#${seq} at ${item.start.toFixed(3)} s, ${item.duration.toFixed(3)} s` + (text ? ` — ${text}` : "");
  $("chunks").appendChild(li);
  const total = state.scheduled.reduce((a, c) => a + c.duration, 0);
  $("audio-seconds").textContent = total.toFixed(2);
  $("chunk-count").textContent = state.scheduled.length;
  drawSoon();
}

// -- the timeline ------------------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
const TL = { width: 720, left: 118, right: 12, rows: { text: 28, audio: 62, gap: 96 }, axis: 120 };
let drawPending = false;

function drawSoon() {
  if (!drawPending) {
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; drawTimeline(); });
  }
}

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function tickStep(span) {
  for (const step of [0.5, 1, 2, 5, 10, 20, 30, 60]) if (span / step <= 12) return step;
  return 120;
}

// One time axis: text arriving (a tick per piece), audio as scheduled (a bar per chunk), the gaps
// heard (red), first audio (dashed). Redrawn whole on each change (a reply has tens of chunks).
function drawTimeline() {
  const svg = $("timeline");
  svg.replaceChildren();
  const ends = [...state.textS, ...state.scheduled.map((c) => c.plays + c.duration), ...state.gaps.map((g) => g.end)];
  const span = Math.max(1, ...ends) * 1.03;
  const x = (s) => TL.left + (s / span) * (TL.width - TL.left - TL.right);
  for (const [row, label] of [["text", "text arriving"], ["audio", "audio scheduled"], ["gap", "gaps heard"]]) {
    svg.append(el("text", { class: "row-label", x: 6, y: TL.rows[row] + 4 }, label));
    svg.append(el("line", { class: "axis", x1: TL.left, x2: TL.width - TL.right, y1: TL.rows[row], y2: TL.rows[row] }));
  }
  const step = tickStep(span);
  for (let s = 0; s <= span; s += step) {
    svg.append(el("line", { class: "axis", x1: x(s), x2: x(s), y1: TL.axis - 4, y2: TL.axis + 2 }));
    svg.append(el("text", { class: "tick-label", x: x(s), y: TL.axis + 16, "text-anchor": "middle" }, `${+s.toFixed(1)} s`));
  }
  for (const s of state.textS) {
    svg.append(el("line", { class: "text", x1: x(s), x2: x(s), y1: TL.rows.text - 9, y2: TL.rows.text + 9 }));
  }
  for (const c of state.scheduled) {
    const bar = el("rect", { class: "audio", x: x(c.plays), y: TL.rows.audio - 9, height: 18,
      width: Math.max(1, x(c.plays + c.duration) - x(c.plays)), "data-seq": c.seq });
    bar.append(el("title", {}, `#${c.seq}: arrived ${c.arrived.toFixed(2)} s, plays ${c.plays.toFixed(2)}–` +
      `${(c.plays + c.duration).toFixed(2)} s`));
    svg.append(bar);
  }
  for (const g of state.gaps) {
    const gap = el("rect", { class: "gap", x: x(g.start), y: TL.rows.gap - 7, height: 14,
      width: Math.max(2, x(g.end) - x(g.start)) });
    gap.append(el("title", {}, `silence ${(g.end - g.start).toFixed(2)} s`));
    svg.append(gap);
  }
  if (state.firstAudioMs !== null) {
    const s = state.firstAudioMs / 1000;
    svg.append(el("line", { class: "first", x1: x(s), x2: x(s), y1: 10, y2: TL.axis - 4 }));
    svg.append(el("text", { class: "tick-label", x: x(s) + 4, y: 12 }, `first audio ${state.firstAudioMs} ms`));
  }
}

function handle(event, t0, sampleRate) {
  state.events++;
  switch (event.type) {
    case "text_delta":
      if (state.firstTextMs === null) {
        state.firstTextMs = Math.round(performance.now() - t0);
        $("first-text-ms").textContent = state.firstTextMs;
      }
      $("text").textContent += event.text;
      state.textS.push(+sinceAsk().toFixed(4));
      drawSoon();
      break;
    case "audio_stream_start":
      sampleRate.value = event.sample_rate || 24000;
      break;
    case "audio_chunk":
      if (state.firstAudioMs === null) {
        state.firstAudioMs = Math.round(performance.now() - t0);
        $("first-audio-ms").textContent = state.firstAudioMs;
      }
      schedule(pcmToFloat(event.audio), sampleRate.value, event.seq, event.text);
      break;
    case "voice_lost":
      setVoice("lost", `voice lost (${event.code}), reconnecting…`);
      break;
    case "voice_restored":
      setVoice("restored", `voice restored (${event.resent} sentence(s) sent again)`);
      break;
    case "error":
      if (event.fatal && event.code === "tts_unavailable") setVoice("unavailable", "voice unavailable");
      $("error").hidden = false;
      $("error").textContent += `${event.code}: ${event.message}\n`;
      break;
    case "agent_end":
      state.server = event;
      checkTts();
      break;
  }
}

async function ask(ev) {
  ev.preventDefault();
  if (audioCtx && document.body.dataset.state === "playing") { // the last reply is still playing: cut it
    audioCtx.close();
    audioCtx = null;
  }
  if (!audioCtx) audioCtx = new AudioContext(); // created on the click: allowed to play
  await audioCtx.resume();
  nextStart = 0;
  clearTimeout(playedOut);
  Object.assign(state, {
    scheduled: [], events: 0, firstAudioMs: null, firstTextMs: null, server: null, voice: [], gapS: 0,
    textS: [], gaps: [], t0: performance.now(),
  });
  drawTimeline();
  showSlow();
  setVoice("ok", "ok");
  for (const id of ["text", "chunks"]) $(id).textContent = "";
  for (const id of ["first-text-ms", "first-audio-ms"]) $(id).textContent = "–";
  $("error").hidden = true;
  $("error").textContent = "";
  const body = { prompt: $("prompt").value, mode: $("mode").value };
  if ($("voice").value.trim()) body.voice = $("voice").value.trim();
  const speed = parseFloat($("speed").value);
  if (!Number.isNaN(speed) && speed !== 1) body.speed = speed;

  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  setState("streaming");
  const t0 = state.t0;
  const sampleRate = { value: 24000 };
  try {
    const resp = await fetch("/invocations", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || `HTTP ${resp.status}`);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
        if (data) handle(JSON.parse(data), t0, sampleRate);
      }
    }
    playOut();
    return;
  } catch (err) {
    if (err.name === "AbortError") {
      setState("stopped");
    } else {
      $("error").hidden = false;
      $("error").textContent = String(err.message || err);
      setState("error");
    }
  }
  finish();
}

// The reply is complete: "playing" (Stop still active) until the last scheduled audio has been heard.
function playOut() {
  const left = audioCtx ? nextStart - audioCtx.currentTime : 0;
  if (left <= 0) {
    setState("done");
    finish();
    return;
  }
  setState("playing");
  $("send").disabled = false;
  playedOut = setTimeout(playOut, Math.ceil(left * 1000) + 20);
}

function finish() {
  $("send").disabled = false;
  $("stop").disabled = true;
  drawSoon();
}

function stop() {
  clearTimeout(playedOut);
  if (controller) controller.abort();
  if (audioCtx) {
    audioCtx.close();
    audioCtx = null;
  }
  if (document.body.dataset.state === "playing") { // the stream had ended; the audio is cut here
    setState("stopped");
    finish();
  }
}

$("ask").addEventListener("submit", ask);
checkTts(); // a server already behind real time says so before the first question
$("stop").addEventListener("click", stop);
