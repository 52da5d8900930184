// Tessera dashboard: filters, pagination and the GPU detail panel. Read-only; no network requests.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };

  // Queue tables: one per resource, the radio buttons pick which is shown.
  document.querySelectorAll('input[name="q-res"]').forEach(function (radio) {
    radio.addEventListener("change", function () {
      document.querySelectorAll("table.queues").forEach(function (t) {
        t.hidden = t.getAttribute("data-res") !== radio.value;
      });
    });
  });

  var dataEl = $("map-data");
  var map = $("gpu-map");
  if (!dataEl || !map) { return; }
  var data = JSON.parse(dataEl.textContent);
  var rows = Array.prototype.slice.call(map.querySelectorAll(".node"));
  var page = 0;

  // Lower-case text a row is found by: its nodes' names and every pod on them.
  var haystack = rows.map(function (row) {
    var g = data.groups[Number(row.getAttribute("data-g"))];
    var words = g.members.slice();
    g.members.forEach(function (name) {
      (data.nodes[name] || []).forEach(function (cell) {
        cell[6].forEach(function (s) { words.push(s[0]); });
      });
    });
    return words.join(" ").toLowerCase();
  });

  function fmtMiB(v) { return v >= 1024 ? (v / 1024).toFixed(1) + " GiB" : v + " MiB"; }
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

  function matches(row, i, pool, model, queue, text) {
    if (pool && row.getAttribute("data-pool") !== pool) { return false; }
    if (model && row.getAttribute("data-model") !== model) { return false; }
    if (queue && (" " + row.getAttribute("data-queues") + " ").indexOf(" " + queue + " ") < 0) { return false; }
    if (text && haystack[i].indexOf(text) < 0) { return false; }
    return true;
  }

  function apply() {
    var pool = $("f-pool").value, model = $("f-model").value, queue = $("f-queue").value;
    var text = $("f-text").value.trim().toLowerCase();
    var size = Number($("f-page-size").value);
    var hits = [];
    var nodes = 0;
    rows.forEach(function (r, i) {
      if (matches(r, i, pool, model, queue, text)) {
        hits.push(r);
        nodes += Number(r.getAttribute("data-count"));
      }
    });
    var pages = size > 0 ? Math.max(1, Math.ceil(hits.length / size)) : 1;
    page = Math.min(page, pages - 1);
    var lo = size > 0 ? page * size : 0, hi = size > 0 ? lo + size : hits.length;
    rows.forEach(function (r) { r.hidden = true; });
    hits.slice(lo, hi).forEach(function (r) { r.hidden = false; });
    map.querySelectorAll(".slice").forEach(function (s) {
      s.classList.toggle("dim", !!queue && s.getAttribute("data-queue") !== queue);
    });
    $("f-status").textContent = nodes + " node" + (nodes === 1 ? "" : "s") + " match";
    $("p-info").textContent = hits.length ? "rows " + (lo + 1) + "–" + Math.min(hi, hits.length) + " of " +
      hits.length + " · page " + (page + 1) + " of " + pages : "no rows";
    $("p-prev").disabled = page === 0;
    $("p-next").disabled = page >= pages - 1;
  }

  function showDetail(cellEl) {
    map.querySelectorAll(".gpu.sel").forEach(function (c) { c.classList.remove("sel"); });
    cellEl.classList.add("sel");
    var g = data.groups[Number(cellEl.getAttribute("data-g"))];
    var index = Number(cellEl.getAttribute("data-i"));
    var panel = $("detail");
    panel.textContent = "";
    var head = g.members.length > 1 ? g.members.length + " nodes alike" : g.members[0];
    panel.appendChild(el("h3", head + " · GPU " + index));
    panel.appendChild(el("p", g.model + " · pool " + g.pool, "muted"));
    g.members.slice(0, 25).forEach(function (name) {
      var cell = (data.nodes[name] || []).filter(function (c) { return c[0] === index; })[0];
      if (!cell) { return; }
      if (g.members.length > 1) { panel.appendChild(el("h3", name)); }
      var used = cell[6].reduce(function (a, s) { return a + s[2]; }, 0);
      panel.appendChild(el("p", cell[1] + " · " + fmtMiB(cell[2]) + " · " + used + " milli assigned, " +
        cell[3] + " free" + (cell[4] ? "" : " · UNHEALTHY" + (cell[5] ? ": " + cell[5] : "")), cell[4] ? "" : "over"));
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
      row(t, ["pod", "queue", "milli", "MiB", m ? "used" : ""], true);
      cell[6].forEach(function (s) {
        var meas = measuredBy[s[0]];
        var usedCell = meas ? el("span", fmtMiB(meas[1]) + (meas[3] ? " over limit" : ""), meas[3] ? "over" : "") : "";
        row(t, [s[0] + (s[4] ? " (gang " + s[4] + ")" : ""), swatch(s[1]), s[2], s[3], usedCell]);
      });
      if (!cell[6].length) { row(t, ["(free)", "", "", "", ""]); }
      panel.appendChild(t);
    });
    if (g.members.length > 25) { panel.appendChild(el("p", "… and " + (g.members.length - 25) + " more nodes", "muted")); }
  }

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
  ["f-pool", "f-model", "f-queue", "f-page-size"].forEach(function (id) {
    $(id).addEventListener("change", function () { page = 0; apply(); });
  });
  $("f-text").addEventListener("input", function () { page = 0; apply(); });
  $("p-prev").addEventListener("click", function () { page = Math.max(0, page - 1); apply(); });
  $("p-next").addEventListener("click", function () { page += 1; apply(); });
  apply();
})();
