// fairway dashboard: polls api/status and redraws two tables, and
// api/partners for the partners panel of one tenant. Plain JavaScript, no
// build step; every value goes in through textContent.
//
// The server answers one page of tenants at a time (page, filter); the
// page keeps both in its address (?filter=…&page=…), so a link or a
// reload shows the same tenants. A tenant token's view shows its own
// partners; an admin picks a tenant by its name (?tenant=…).
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
  // Backlog bars are on a log scale up to the largest backlog, and never
  // up to less than this: a backlog of 1 is a sliver, not a full bar.
  const BACKLOG_SCALE_MIN = 1000;
  // Reasons that are real problems, drawn in the alarm colour. "at slot
  // limit" is the normal state of a busy tenant and is not among them.
  const ALARMS = new Set(["partner circuit open", "stream reset"]);
  let refresh = 2000;
  const view = { filter: "", page: 1, tenant: "" };

  function readAddress() {
    const p = new URLSearchParams(location.search);
    view.filter = (p.get("filter") || "").trim().toLowerCase();
    view.page = Math.max(1, parseInt(p.get("page"), 10) || 1);
    view.tenant = (p.get("tenant") || "").trim();
    document.getElementById("filter").value = view.filter;
  }

  // address returns the query of the view, with its tenant replaced by
  // tenant when given.
  function address(tenant) {
    const p = new URLSearchParams();
    if (view.filter) p.set("filter", view.filter);
    if (view.page > 1) p.set("page", String(view.page));
    const t = tenant === undefined ? view.tenant : tenant;
    if (t) p.set("tenant", t);
    return p.toString();
  }

  // writeAddress puts the view in the address bar and returns the query
  // of api/status (filter and page).
  function writeAddress() {
    const q = address();
    history.replaceState(null, "", location.pathname + (q ? "?" + q : ""));
    return address("");
  }

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
    document.getElementById("pager").hidden = true;
    document.getElementById("metrics-note").hidden = true;
    document.getElementById("partners-panel").hidden = true;
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

  // bar is a value with a proportional bar; cls marks it (full, off).
  function bar(text, frac, cls, title) {
    const fill = el("i");
    fill.style.width = (Math.max(0, Math.min(1, frac)) * 100).toFixed(1) + "%";
    const b = el("div", { class: "bar" + (cls ? " " + cls : "") }, fill);
    if (title) b.title = title;
    return el("div", { class: "cell" }, el("span", { class: "value" }, text), b);
  }

  // backlogBar draws n on a log scale up to scale.
  function backlogBar(n, scale) {
    return bar(int(n), Math.log1p(n) / Math.log1p(scale), "", "log scale: a full bar is " + int(scale));
  }

  // slots draws in-use/limit. Every slot busy is "full" (a calm colour:
  // it is how a busy tenant is held to its share), no slot at all "off".
  function slots(inUse, limit) {
    const cls = limit === 0 ? "off" : inUse >= limit ? "full" : "";
    return bar(inUse + "/" + limit, limit > 0 ? inUse / limit : 0, cls);
  }

  function dead(n) {
    return el("td", { class: n > 0 ? "num dead alarm" : "num dead" }, int(n));
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

  // destColumns are the columns of the destinations table, in order: head
  // is its heading (given the spans of the figures), cell its cell for a
  // destination d with figures s (null: no data).
  const destColumns = [
    { head: () => "Destination", cell: d => el("td", { class: "dest" }, d.dest) },
    { head: () => "Backlog", num: true, cell: d => el("td", { class: "num backlog" }, int(d.backlog)) },
    { head: () => "Slots in use", cell: d => el("td", { class: "slots" }, slots(d.in_use, d.limit)) },
    { head: () => "Dead letters", num: true, cell: d => dead(d.dead_letters) },
    {
      head: f => "Events/s" + (f.summary ? " (" + dur(f.summary) + ")" : ""), num: true,
      cell: (d, s) => el("td", { class: "num rate" }, s ? rate(s.events_per_second) : noData())
    },
    {
      head: f => "p95 end-to-end" + (f.summary ? " (" + dur(f.summary) + ")" : ""), num: true,
      cell: (d, s) => el("td", { class: "num p95" }, s ? (s.p95_seconds == null ? "–" : dur(s.p95_seconds)) : noData())
    },
    {
      head: f => "Events/s, last " + (f.window ? dur(f.window) : "minutes"),
      cell: (d, s) => el("td", { class: "series" }, s ? spark(s.series) : noData())
    },
  ];

  function renderDests(snap) {
    let summary = 0, window = 0;
    for (const d of snap.dests) {
      if (d.stats) { summary = Math.max(summary, d.stats.summary_seconds); window = Math.max(window, d.stats.window_seconds); }
    }
    document.querySelector("#dests thead").replaceChildren(el("tr", {},
      ...destColumns.map(c => el("th", c.num ? { class: "num" } : {}, c.head({ summary, window })))));
    document.querySelector("#dests tbody").replaceChildren(...snap.dests.map(d =>
      el("tr", { "data-dest": d.dest }, ...destColumns.map(c => c.cell(d, d.stats)))));
    renderMetricsNote(snap);
  }

  // renderPartitions lists the partitions of PRODUCTS, the dispatcher
  // reading each and their backlog (admin view only).
  function renderPartitions(snap) {
    const parts = snap.partitions || [];
    document.getElementById("partitions-panel").hidden = parts.length === 0;
    document.querySelector("#partitions tbody").replaceChildren(...parts.map(p =>
      el("tr", { "data-partition": String(p.partition) },
        el("td", { class: "num" }, String(p.partition)),
        el("td", {}, p.dispatcher || el("span", { class: "nodata" }, "none")),
        el("td", { class: "num" }, p.dispatcher ? dur(p.seen_ns / 1e9) : "–"),
        el("td", { class: "num" }, int(p.backlog)),
        el("td", { class: "num" }, int(p.tenants)))));
  }

  // renderMetricsNote says where throughput and latency come from when
  // they cannot be shown: no sink metrics configured, or some not
  // answering.
  function renderMetricsNote(snap) {
    const note = document.getElementById("metrics-note");
    let text = "";
    if (snap.tenant) {
      text = "";
    } else if (!snap.throughput) {
      text = "Events/s and p95 come from the sinks' metrics: start fairway serve with " +
        "--sink-metrics host:port,… (the --listen address of every sinks process).";
    } else {
      const failing = (snap.metrics_sources || []).filter(s => s.error);
      if (failing.length) {
        text = "Sink metrics: " + failing.length + " of " + snap.metrics_sources.length + " not answering: " +
          failing.map(s => s.source + " (" + s.error + ")").join("; ");
      }
    }
    note.textContent = text;
    note.hidden = !text;
  }

  function reasonClass(reason) {
    return "reason reason-" + reason.replace(/[^a-z0-9]+/g, "-") + (ALARMS.has(reason) ? " alarm" : "");
  }

  // tenantName is a tenant's name; a link that opens its partners panel
  // when an admin can pick one.
  function tenantName(snap, tenant) {
    if (!snap.partners || snap.tenant) return tenant;
    return el("a", { class: "pick", href: "?" + address(tenant), "data-tenant": tenant, title: "partners of " + tenant }, tenant);
  }

  function renderTenants(snap) {
    const scale = Math.max(snap.max_backlog || 0, BACKLOG_SCALE_MIN);
    document.querySelector("#tenants tbody").replaceChildren(...snap.rows.map(r =>
      el("tr", { "data-tenant": r.tenant, "data-dest": r.dest },
        el("td", { class: "tenant" }, tenantName(snap, r.tenant)),
        el("td", { class: "dest" }, r.dest),
        el("td", { class: "backlog" }, backlogBar(r.backlog, scale)),
        el("td", { class: "num oldest" }, r.backlog > 0 ? dur(r.oldest_age_seconds) : "–"),
        el("td", { class: "slots" }, slots(r.in_use, r.limit)),
        el("td", { class: "num weight" }, r.weight),
        dead(r.dead_letters),
        el("td", { class: "why" }, el("span", { class: reasonClass(r.reason) }, r.reason),
          r.replaying && r.reason !== "replaying" ? el("span", { class: "reason reason-replaying" }, " replaying") : "",
          r.replaying ? el("span", { class: "replay", title: "the replay's events left, and its slots in use of its own" },
            " " + int(r.replay_left || 0) + " left, " + int(r.replay_in_use || 0) + "/" + int(r.replay_slots || 0) + " replay slots") : "",
          r.expiring ? el("span", { class: "reason expiring alarm", title: "the oldest waiting event leaves PRODUCTS (MaxAge) then" },
            " oldest expires in " + dur(r.expires_in_seconds)) : ""))));
    document.getElementById("backlog-head").title = "bars on a log scale: a full bar is " + int(scale);

    const count = snap.filter
      ? int(snap.matched) + " of " + int(snap.tenants) + " match"
      : int(snap.tenants) + " in all";
    const from = (snap.page - 1) * snap.page_size + 1, to = Math.min(snap.page * snap.page_size, snap.matched);
    document.getElementById("tenant-count").textContent =
      count + (snap.pages > 1 ? ", " + int(from) + "–" + int(to) + " listed, the most backlog first" : "");
    document.getElementById("filter-form").hidden = !!snap.tenant;
    document.getElementById("pager").hidden = snap.pages <= 1;
    document.getElementById("page-info").textContent = "page " + int(snap.page) + " of " + int(snap.pages);
    document.getElementById("prev").disabled = snap.page <= 1;
    document.getElementById("next").disabled = snap.page >= snap.pages;
    if (view.page !== snap.page) { // past the last page: the server served the last
      view.page = snap.page;
      writeAddress();
    }
  }

  function pct(r) {
    const p = r * 100;
    return (p === 100 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + "%";
  }

  // ago says how long before now (a time from the server) t was.
  function ago(t, now) {
    return dur(Math.max(0, (Date.parse(now) - Date.parse(t)) / 1000)) + " ago";
  }

  // partnerRow draws one partner. Only a failed newest attempt is red: an
  // error followed by accepted requests is history, drawn muted.
  function partnerRow(p, now) {
    const last = el("td", { class: "last" }, ago(p.last_at, now), " ",
      el("span", { class: p.last_failed ? "outcome alarm" : "outcome ok" }, p.last_failed ? "failed" : "ok"));
    last.title = p.last_at;
    let err = el("td", { class: "error-text none" }, "–");
    if (p.last_error) {
      err = el("td", { class: p.last_failed ? "error-text alarm" : "error-text old" },
        el("span", { class: "message" }, p.last_error), " ", el("span", { class: "when" }, ago(p.last_error_at, now)));
      err.title = p.last_error + "\n" + p.last_error_at;
    }
    return el("tr", { "data-partner": p.partner, class: p.last_failed ? "failing" : "" },
      el("td", { class: "partner" }, p.partner),
      el("td", { class: "num attempts" }, int(p.attempts)),
      el("td", { class: "num success" }, pct(p.success_rate)),
      last, err);
  }

  // renderPartners fetches and draws the partners panel: the tenant
  // token's own tenant, or the tenant an admin picked; hidden otherwise.
  async function renderPartners(snap, tok, mine) {
    const panel = document.getElementById("partners-panel");
    const tenant = snap.tenant || view.tenant;
    if (!snap.partners || !tenant) {
      panel.hidden = true;
      return;
    }
    const note = document.getElementById("partners-note");
    let text = "";
    try {
      const res = await fetch("api/partners" + (snap.tenant ? "" : "?tenant=" + encodeURIComponent(tenant)),
        { cache: "no-store", headers: tok ? { Authorization: "Bearer " + tok } : {} });
      const list = await res.json();
      if (mine !== asked) return;
      if (!res.ok || list.error) throw new Error(list.error || res.status + " " + res.statusText);
      document.querySelector("#partners tbody").replaceChildren(...(list.partners.length
        ? list.partners.map(p => partnerRow(p, list.generated_at))
        : [el("tr", {}, el("td", { colspan: "5", class: "nodata" }, "no request to a partner in the delivery log"))]));
    } catch (err) {
      if (mine !== asked) return;
      text = "partners unavailable: " + err.message;
    }
    document.getElementById("partners-tenant").textContent = tenant;
    document.getElementById("partners-close").hidden = !!snap.tenant;
    document.getElementById("partners-close").href = "?" + address("");
    note.textContent = text;
    note.hidden = !text;
    panel.hidden = false;
  }

  function showError(msg) {
    const e = document.getElementById("error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  let timer = 0;
  let asked = 0; // the newest request; older answers are dropped

  async function tick() {
    clearTimeout(timer);
    const tok = token();
    const q = writeAddress();
    const mine = ++asked;
    try {
      const res = await fetch("api/status" + (q ? "?" + q : ""),
        { cache: "no-store", headers: tok ? { Authorization: "Bearer " + tok } : {} });
      if (mine !== asked) return;
      if (res.status === 401) {
        askToken(tok ? "the token was refused: unknown or revoked" : "");
        return;
      }
      const snap = await res.json();
      if (mine !== asked) return;
      if (res.status === 400) { // a filter the server refuses: say why, keep the rows
        showError(snap.error);
        return;
      }
      if (snap.refresh_ms > 0) refresh = snap.refresh_ms;
      if (!res.ok || snap.error) throw new Error(snap.error || res.status + " " + res.statusText);
      renderDests(snap);
      renderPartitions(snap);
      renderTenants(snap);
      await renderPartners(snap, tok, mine);
      if (mine !== asked) return;
      document.getElementById("updated").textContent =
        "updated " + new Date(snap.generated_at).toLocaleTimeString("en-GB") +
        (snap.tenant ? " · tenant " + snap.tenant + " only; throughput is shown to admin tokens" : "");
      document.getElementById("forget").hidden = !tok;
      showError("");
    } catch (err) {
      if (mine !== asked) return;
      showError("status unavailable: " + err.message);
    }
    timer = setTimeout(tick, refresh);
  }

  let typing = 0;
  document.getElementById("filter").addEventListener("input", ev => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      view.filter = ev.target.value.trim().toLowerCase();
      view.page = 1;
      tick();
    }, 250);
  });
  document.getElementById("filter-form").addEventListener("submit", ev => {
    ev.preventDefault();
    clearTimeout(typing);
    view.filter = document.getElementById("filter").value.trim().toLowerCase();
    view.page = 1;
    tick();
  });
  document.querySelector("#tenants tbody").addEventListener("click", ev => {
    const a = ev.target.closest("a.pick");
    if (!a || ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    ev.preventDefault();
    view.tenant = a.dataset.tenant;
    tick();
  });
  document.getElementById("partners-close").addEventListener("click", ev => {
    ev.preventDefault();
    view.tenant = "";
    tick();
  });
  document.getElementById("prev").addEventListener("click", () => { view.page = Math.max(1, view.page - 1); tick(); });
  document.getElementById("next").addEventListener("click", () => { view.page += 1; tick(); });
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
  readAddress();
  tick();
})();
