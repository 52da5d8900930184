// Tessera dashboard: filters, pagination, the GPU detail panel, and live refresh. Read-only: the only
// request it makes is a GET of its own page (served pages only; a saved report never fetches anything).
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var REFRESH_MS = 10000;
  // What the user chose, kept across refreshes: the page is re-rendered by the server, the view is theirs.
  var state = { pool: "", model: "", domain: "", queue: "", text: "", size: null, page: 0, res: "gpu", detail: null,
                warningsOpen: false };
  var data = null, map = null, rows = [], haystack = [];

  function fmtMiB(v) { return v >= 1024 ? (v / 1024).toFixed(1) + " GiB" : v + " MiB"; }
  function fmtGPU(milli) { return String(Math.round(milli) / 1000); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function row(table, cells, header) {
    var tr = document.createElement("tr");
    cells.forEach(function (c) {
      var td = el(header ? "th" : "td");
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c === null ? "" : String(c); }
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }
  function swatch(queue) {
    var s = el("span", null, "swatch");
    s.style.background = data.colors[queue] || "#999";
    var wrap = el("span");
    wrap.appendChild(s);
    wrap.appendChild(document.createTextNode(queue));
    return wrap;
  }
  function setSelect(id, value) {  // a value that disappeared since (a pool, a queue) falls back to "all"
    var sel = $(id);
    if (!sel) { return; }
    var ok = Array.prototype.some.call(sel.options, function (o) { return o.value === value; });
    sel.value = ok ? value : "";
  }

  function showQueues() {
    document.querySelectorAll("table.queues").forEach(function (t) {
      t.hidden = t.getAttribute("data-res") !== state.res;
    });
  }

  function matches(r, i) {
    if (state.pool && r.getAttribute("data-pool") !== state.pool) { return false; }
    if (state.model && r.getAttribute("data-model") !== state.model) { return false; }
    // A domain is a path prefix: zone-1 holds zone-1/rack-a, which holds zone-1/rack-a/a-2.
    if (state.domain && (r.getAttribute("data-domain") + "/").indexOf(state.domain + "/") !== 0) { return false; }
    if (state.queue && (" " + r.getAttribute("data-queues") + " ").indexOf(" " + state.queue + " ") < 0) { return false; }
    if (state.text && haystack[i].indexOf(state.text) < 0) { return false; }
    return true;
  }

  function apply() {
    var size = Number(state.size);
    var hits = [];
    var nodes = 0;
    rows.forEach(function (r, i) {
      if (matches(r, i)) {
        hits.push(r);
        nodes += Number(r.getAttribute("data-count"));
      }
    });
    var pages = size > 0 ? Math.max(1, Math.ceil(hits.length / size)) : 1;
    state.page = Math.min(state.page, pages - 1);
    var lo = size > 0 ? state.page * size : 0, hi = size > 0 ? lo + size : hits.length;
    rows.forEach(function (r) { r.hidden = true; });
    hits.slice(lo, hi).forEach(function (r) { r.hidden = false; });
    map.querySelectorAll(".slice").forEach(function (s) {
      s.classList.toggle("dim", !!state.queue && s.getAttribute("data-queue") !== state.queue);
    });
    $("f-status").textContent = nodes + " node" + (nodes === 1 ? "" : "s") + " match";
    $("p-info").textContent = hits.length ? "rows " + (lo + 1) + "–" + Math.min(hi, hits.length) + " of " +
      hits.length + " · page " + (state.page + 1) + " of " + pages : "no rows";
    $("p-prev").disabled = state.page === 0;
    $("p-next").disabled = state.page >= pages - 1;
  }

  function showDetail(cellEl) {
    map.querySelectorAll(".gpu.sel").forEach(function (c) { c.classList.remove("sel"); });
    cellEl.classList.add("sel");
    var g = data.groups[Number(cellEl.getAttribute("data-g"))];
    var index = Number(cellEl.getAttribute("data-i"));
    state.detail = { node: g.members[0], index: index };
    var panel = $("detail");
    panel.textContent = "";
    var head = g.members.length > 1 ? g.members.length + " nodes alike" : g.members[0];
    panel.appendChild(el("h3", head + " · GPU " + index));
    panel.appendChild(el("p", g.model + " · pool " + g.pool, "muted"));
    (g.domains || []).forEach(function (d) { panel.appendChild(el("p", "topology " + d, "muted")); });
    g.members.slice(0, 25).forEach(function (name) {
      var cell = (data.nodes[name] || []).filter(function (c) { return c[0] === index; })[0];
      if (!cell) { return; }
      if (g.members.length > 1) { panel.appendChild(el("h3", name)); }
      var used = cell[6].reduce(function (a, s) { return a + s[2]; }, 0);
      panel.appendChild(el("p", cell[1] + " · " + fmtMiB(cell[2]) + " · " + fmtGPU(used) + " of 1 GPU assigned, " +
        fmtGPU(cell[3]) + " free" + (cell[4] ? "" : " · UNHEALTHY" + (cell[5] ? ": " + cell[5] : "")), cell[4] ? "" : "over"));
      var m = cell[7];
      var measuredBy = {};
      if (m) {
        m.pods.forEach(function (p) { measuredBy[p[0]] = p; });
        var bits = ["NVML: " + fmtMiB(m.used) + " of " + fmtMiB(m.total) + " used"];
        if (m.util !== null) { bits.push(m.util + "% util"); }
        if (m.temp !== null) { bits.push(m.temp + " °C"); }
        if (m.power !== null) { bits.push(m.power + " W"); }
        panel.appendChild(el("p", bits.join(" · ")));
      }
      var t = el("table");
      row(t, ["pod", "queue", "GPU", "MiB", m ? "used" : ""], true);
      cell[6].forEach(function (s) {
        var meas = measuredBy[s[0]];
        var usedCell = meas ? el("span", fmtMiB(meas[1]) + (meas[3] ? " over limit" : ""), meas[3] ? "over" : "") : "";
        row(t, [s[0] + (s[4] ? " (gang " + s[4] + ")" : "") + (s[5] ? " · " + s[5] : ""), swatch(s[1]), fmtGPU(s[2]), s[3], usedCell]);
      });
      if (!cell[6].length) { row(t, ["(free)", "", "", "", ""]); }
      panel.appendChild(t);
    });
    if (g.members.length > 25) { panel.appendChild(el("p", "… and " + (g.members.length - 25) + " more nodes", "muted")); }
  }

  function reselect() {  // the GPU the user was looking at, found again by node name and index
    if (!state.detail) { return; }
    var found = null;
    map.querySelectorAll(".gpu").forEach(function (c) {
      var g = data.groups[Number(c.getAttribute("data-g"))];
      if (!found && g.members.indexOf(state.detail.node) >= 0 && Number(c.getAttribute("data-i")) === state.detail.index) {
        found = c;
      }
    });
    if (found) { showDetail(found); } else { state.detail = null; }
  }

  // Bind the page as the server rendered it, then put the user's choices back.
  function init() {
    document.querySelectorAll('input[name="q-res"]').forEach(function (radio) {
      radio.checked = radio.value === state.res;
      radio.addEventListener("change", function () { state.res = radio.value; showQueues(); });
    });
    showQueues();
    var warnings = document.querySelector("#warnings details");
    if (warnings) {
      warnings.open = state.warningsOpen;
      warnings.addEventListener("toggle", function () { state.warningsOpen = warnings.open; });
    }
    var dataEl = $("map-data");
    map = $("gpu-map");
    if (!dataEl || !map) { return; }
    data = JSON.parse(dataEl.textContent);
    rows = Array.prototype.slice.call(map.querySelectorAll(".node"));
    // Lower-case text a row is found by: its nodes' names and every pod on them.
    haystack = rows.map(function (r) {
      var g = data.groups[Number(r.getAttribute("data-g"))];
      var words = g.members.slice();
      g.members.forEach(function (name) {
        (data.nodes[name] || []).forEach(function (cell) {
          cell[6].forEach(function (s) { words.push(s[0]); });
        });
      });
      return words.join(" ").toLowerCase();
    });
    setSelect("f-pool", state.pool);
    setSelect("f-model", state.model);
    setSelect("f-domain", state.domain);
    setSelect("f-queue", state.queue);
    $("f-text").value = state.text;
    if (state.size === null) { state.size = $("f-page-size").value; } else { setSelect("f-page-size", state.size); }
    map.addEventListener("click", function (ev) {
      var cell = ev.target.closest ? ev.target.closest(".gpu") : null;
      if (cell) { showDetail(cell); }
    });
    map.addEventListener("keydown", function (ev) {
      if ((ev.key === "Enter" || ev.key === " ") && ev.target.classList.contains("gpu")) {
        ev.preventDefault();
        showDetail(ev.target);
      }
    });
    [["f-pool", "pool"], ["f-model", "model"], ["f-domain", "domain"], ["f-queue", "queue"],
     ["f-page-size", "size"]].forEach(function (p) {
      if (!$(p[0])) { return; }  // no domain filter without a topology
      $(p[0]).addEventListener("change", function () { state[p[1]] = $(p[0]).value; state.page = 0; apply(); });
    });
    $("f-text").addEventListener("input", function () {
      state.text = $("f-text").value.trim().toLowerCase();
      state.page = 0;
      apply();
    });
    $("p-prev").addEventListener("click", function () { state.page = Math.max(0, state.page - 1); apply(); });
    $("p-next").addEventListener("click", function () { state.page += 1; apply(); });
    apply();
    reselect();
  }

  // Live refresh: only where the page was served (a saved report has nothing to ask).
  var live = $("live");
  function say(text) { if (live) { $("live-status").textContent = text; } }
  function refresh(force) {
    if (!force && (document.hidden || !$("live-on").checked)) { return; }
    fetch(location.href, { cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("main");
        if (!fresh) { throw new Error("no dashboard in the answer"); }
        ["header.top", "main", "footer"].forEach(function (sel) {
          var now = document.querySelector(sel), next = doc.querySelector(sel);
          if (now && next) { now.replaceWith(document.importNode(next, true)); }
        });
        init();
        say("updated " + new Date().toLocaleTimeString());
      })
      .catch(function (e) { say("refresh failed (" + e.message + "); retrying"); });
  }
  init();
  if (live && data && /^https?:$/.test(location.protocol)) {
    live.hidden = false;
    setInterval(function () { refresh(false); }, REFRESH_MS);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(false); } });
    $("live-now").addEventListener("click", function () { refresh(true); });
  }
})();
