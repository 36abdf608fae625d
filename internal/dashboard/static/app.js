// fairway dashboard: polls api/status and redraws two tables. Plain
// JavaScript, no build step; every value goes in through textContent.
//
// When the server asks for a token (401), the page shows a form for one and
// keeps it in sessionStorage: it lasts as long as the browser tab and is
// sent only as an Authorization header, never in a URL. A link may carry
// it in the fragment (#token=fw_…), which browsers never send to the
// server; the page moves it to sessionStorage and drops it from the
// address bar at once.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const TOKEN_KEY = "fairway-token";
  let refresh = 2000;

  function takeFragmentToken() {
    const m = /^#(?:.*&)?token=([^&]+)/.exec(location.hash);
    if (!m) return;
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  // askToken stops polling and shows the token form; why says what was
  // wrong with the token sent, if one was.
  function askToken(why) {
    sessionStorage.removeItem(TOKEN_KEY);
    for (const body of document.querySelectorAll("tbody")) body.replaceChildren();
    document.getElementById("tenant-count").textContent = "";
    document.getElementById("forget").hidden = true;
    document.getElementById("login").hidden = false;
    document.getElementById("updated").textContent = "a token is needed";
    showError(why);
    document.getElementById("token").focus();
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : String(k));
    return e;
  }

  function int(n) { return Number(n).toLocaleString("en-US"); }

  function dur(s) {
    if (s == null) return "–";
    if (s === 0) return "0";
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }

  function rate(r) {
    if (r >= 100) return int(Math.round(r));
    return r.toFixed(1);
  }

  // bar is a value with a proportional bar; cls marks it full or off.
  function bar(text, frac, cls) {
    const fill = el("i");
    fill.style.width = Math.max(0, Math.min(1, frac)) * 100 + "%";
    return el("div", { class: "cell" }, el("span", { class: "value" }, text),
      el("div", { class: "bar" + (cls ? " " + cls : "") }, fill));
  }

  // slots draws in-use/limit; red only when work waits for a slot.
  function slots(inUse, limit, waiting) {
    const cls = limit === 0 ? "off" : inUse >= limit && waiting ? "full" : "";
    return bar(inUse + "/" + limit, limit > 0 ? inUse / limit : 0, cls);
  }

  function spark(series) {
    const w = 160, h = 24;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    if (!series || series.length < 2) return svg;
    const top = Math.max(...series.map(p => p.events_per_second), 1e-9);
    const pts = series.map((p, i) =>
      (i * w / (series.length - 1)).toFixed(1) + "," + (h - 1 - p.events_per_second / top * (h - 2)).toFixed(1));
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
    return svg;
  }

  function noData() { return el("span", { class: "nodata" }, "no data"); }

  function renderDests(snap) {
    const body = document.querySelector("#dests tbody");
    const rows = [];
    let summary = 0, win = 0;
    for (const d of snap.dests) {
      const s = d.stats;
      if (s) { summary = Math.max(summary, s.summary_seconds); win = Math.max(win, s.window_seconds); }
      rows.push(el("tr", { "data-dest": d.dest },
        el("td", { class: "dest" }, d.dest),
        el("td", { class: "num backlog" }, int(d.backlog)),
        el("td", { class: "slots" }, slots(d.in_use, d.limit, d.backlog > 0)),
        el("td", { class: "num dead" }, int(d.dead_letters)),
        el("td", { class: "num rate" }, s ? rate(s.events_per_second) : noData()),
        el("td", { class: "num p95" }, s ? (s.p95_seconds == null ? "–" : dur(s.p95_seconds)) : noData()),
        el("td", { class: "series" }, s ? spark(s.series) : noData())));
    }
    body.replaceChildren(...rows);
    document.getElementById("rate-head").textContent = summary ? "Events/s (" + dur(summary) + ")" : "Events/s";
    document.getElementById("p95-head").textContent = summary ? "p95 end-to-end (" + dur(summary) + ")" : "p95 end-to-end";
    document.getElementById("series-head").textContent = win ? "Events/s, last " + dur(win) : "Events/s, last minutes";
  }

  function renderTenants(snap) {
    const body = document.querySelector("#tenants tbody");
    let top = 1;
    for (const r of snap.rows) top = Math.max(top, r.backlog);
    if (snap.other) top = Math.max(top, snap.other.backlog);
    const rows = snap.rows.map(r => el("tr", { "data-tenant": r.tenant, "data-dest": r.dest },
      el("td", { class: "tenant" }, r.tenant),
      el("td", { class: "dest" }, r.dest),
      el("td", { class: "backlog" }, bar(int(r.backlog), r.backlog / top)),
      el("td", { class: "num oldest" }, r.backlog > 0 ? dur(r.oldest_age_seconds) : "–"),
      el("td", { class: "slots" }, slots(r.in_use, r.limit, r.reason === "at slot limit")),
      el("td", { class: "num weight" }, r.weight),
      el("td", { class: "num dead" }, int(r.dead_letters)),
      el("td", { class: "why" }, el("span", { class: "reason reason-" + r.reason.replace(/[^a-z0-9]+/g, "-") }, r.reason))));
    const o = snap.other;
    if (o) {
      rows.push(el("tr", { class: "other", "data-tenant": "" },
        el("td", { class: "tenant" }, "other (" + int(o.tenants) + " tenants)"),
        el("td", { class: "dest" }, int(o.pairs) + " pairs"),
        el("td", { class: "backlog" }, bar(int(o.backlog), o.backlog / top)),
        el("td", { class: "num oldest" }, o.backlog > 0 ? dur(o.oldest_age_seconds) : "–"),
        el("td", { class: "slots" }, slots(o.in_use, o.limit, o.backlog > 0)),
        el("td", { class: "num weight" }, ""),
        el("td", { class: "num dead" }, int(o.dead_letters)),
        el("td", { class: "why" }, "")));
    }
    body.replaceChildren(...rows);
    const shown = snap.tenants - (o ? o.tenants : 0);
    document.getElementById("tenant-count").textContent =
      snap.tenants + " in all" + (o ? ", " + shown + " with the most backlog listed" : "");
  }

  function showError(msg) {
    const e = document.getElementById("error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  let timer = 0;

  async function tick() {
    clearTimeout(timer);
    const tok = token();
    try {
      const res = await fetch("api/status", { cache: "no-store", headers: tok ? { Authorization: "Bearer " + tok } : {} });
      if (res.status === 401) {
        askToken(tok ? "the token was refused: unknown or revoked" : "");
        return;
      }
      const snap = await res.json();
      if (snap.refresh_ms > 0) refresh = snap.refresh_ms;
      if (!res.ok || snap.error) throw new Error(snap.error || res.status + " " + res.statusText);
      renderDests(snap);
      renderTenants(snap);
      document.getElementById("updated").textContent =
        "updated " + new Date(snap.generated_at).toLocaleTimeString("en-GB") +
        (snap.tenant ? " · tenant " + snap.tenant + " only; throughput is shown to admin tokens"
          : snap.throughput ? "" : " · no sink metrics in this process: throughput shows no data");
      document.getElementById("forget").hidden = !tok;
      showError("");
    } catch (err) {
      showError("status unavailable: " + err.message);
    }
    timer = setTimeout(tick, refresh);
  }

  document.getElementById("login").addEventListener("submit", ev => {
    ev.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    document.getElementById("login").hidden = true;
    showError("");
    tick();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });

  takeFragmentToken();
  tick();
})();
