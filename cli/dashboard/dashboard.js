// File: cli/dashboard/dashboard.js
//
// The dashboard's entry point (index.html loads it as a module; it imports the others): polls
// api/job (a relative URL) every 1000 ms, or every ?interval=MS (at least 10), and renders each
// response in place (cards.js, charts.js). A read error (`error` in the response, or no answer)
// is shown in #error while the last data stays on screen; a job that does not exist is said so in
// #not-found. After each response rendered, body's data-loaded is 'true' and data-updates counts
// them. The charts are redrawn when their boxes change size.

import { MID, $, str, isNum, hhmmss, fmtAge } from './format.js';
import { charts, chartOrder, renderCharts } from './charts.js';
import { renderSummary, renderMembers, renderEvictions, renderControl, renderEvents } from './cards.js';

var params = new URLSearchParams(window.location.search);
var interval = parseInt(params.get('interval'), 10);
if (!(interval >= 10)) interval = 1000;

var updates = 0;
var lastData = null;      // last successfully rendered response (exists true or false)
var lastOkAt = null;      // Date.now() of the last successful response

// --------------------------------------------------------------- rendering
function render(d) {
  renderSummary(d);
  renderCharts(d);
  renderMembers(d);
  renderEvictions(d);
  renderControl(d);
  renderEvents(d);
  var st = d.state || {};
  if (d.exists === false) {
    $('meta-fresh').textContent = 'job not found';
  } else if (isNum(st.updated_at_ms) && isNum(d.now_ms)) {
    $('meta-fresh').textContent = 'state updated ' + fmtAge(Math.max(0, (d.now_ms - st.updated_at_ms) / 1000)) + ' ago';
  } else {
    $('meta-fresh').textContent = 'no state yet';
  }
  $('meta-redis').textContent = str(d.redis);
}

function showError(msg) {
  var e = $('error');
  if (e.textContent !== msg) e.textContent = msg;
  e.hidden = false;
  $('conn-dot').className = 'dot bad';
}
function hideError() { $('error').hidden = true; $('error').textContent = ''; }

function handle(d) {
  if (!d || typeof d !== 'object') throw new Error('unexpected response from api/job');
  if (d.error) {
    // A read error: show it, keep the last data on screen.
    showError(String(d.error));
    if (d.redis) $('meta-redis').textContent = String(d.redis);
    return;
  }
  hideError();
  var nf = $('not-found');
  if (d.exists === false) {
    var msg = "no job '" + str(d.job) + "' in redis at " + str(d.redis);
    if (nf.textContent !== msg) nf.textContent = msg;
    nf.hidden = false;
    render({ job: d.job, exists: false, redis: d.redis, now_ms: d.now_ms, state: {}, members: [],
             evictions: [], requests: [], cordons: [], settings: {}, events: [], samples: [] });
    $('conn-dot').className = 'dot warn';
  } else {
    nf.hidden = true;
    nf.textContent = '';
    render(d);
    $('conn-dot').className = 'dot ok';
  }
  lastData = d;
  lastOkAt = Date.now();
  updates++;
  document.body.dataset.updates = String(updates);
  document.body.dataset.loaded = 'true';
}

// ----------------------------------------------------------------- polling
function poll() {
  var ctl = typeof AbortController === 'function' ? new AbortController() : null;
  var timer = setTimeout(function () { if (ctl) ctl.abort(); }, Math.max(5000, interval * 3));
  var done = false;
  function next() {
    if (done) return;
    done = true;
    clearTimeout(timer);
    $('meta-poll').textContent = 'polled ' + hhmmss(Date.now()) + ' UTC' + MID + 'every ' +
      (interval >= 1000 ? (interval / 1000) + ' s' : interval + ' ms');
    setTimeout(poll, interval);
  }
  fetch('api/job', { cache: 'no-store', signal: ctl ? ctl.signal : undefined, headers: { 'Accept': 'application/json' } })
    .then(function (r) {
      if (!r.ok) {
        return r.text().catch(function () { return ''; }).then(function (t) {
          var detail = '';
          try { var j = JSON.parse(t); if (j && j.error) detail = ': ' + j.error; } catch (e) { detail = t ? ': ' + t.slice(0, 160) : ''; }
          throw { shown: 'dashboard server error: HTTP ' + r.status + detail };
        });
      }
      return r.json().catch(function () { throw { shown: 'dashboard server sent invalid JSON' }; });
    }, function (e) {
      throw { shown: 'dashboard server unreachable' + (e && e.name === 'AbortError' ? ' (request timed out)' : '') };
    })
    .then(function (d) {
      try { handle(d); }
      catch (e) {
        if (window.console) console.error(e);
        throw { shown: 'dashboard could not render the response: ' + (e && e.message ? e.message : e) };
      }
    })
    .catch(function (e) {
      showError(e && e.shown ? e.shown : 'dashboard server unreachable');
    })
    .then(next, next);
}

// Redraw the charts when their boxes change size (window resize, or a
// banner appearing above them), from the data last rendered.
var redrawPending = false;
function scheduleRedraw() {
  if (redrawPending) return;
  redrawPending = true;
  requestAnimationFrame(function () {
    redrawPending = false;
    renderCharts(lastData && lastData.exists !== false ? lastData : {});
  });
}
var sizes = {};
if (typeof ResizeObserver === 'function') {
  var ro = new ResizeObserver(function () {
    var changed = false;
    chartOrder.forEach(function (k) {
      var svg = charts[k].svg, key = svg.clientWidth + 'x' + svg.clientHeight;
      if (sizes[k] !== key) { sizes[k] = key; changed = true; }
    });
    if (changed) scheduleRedraw();
  });
  chartOrder.forEach(function (k) { ro.observe(charts[k].svg.parentNode); });
} else {
  window.addEventListener('resize', scheduleRedraw);
}

renderCharts({});
poll();
