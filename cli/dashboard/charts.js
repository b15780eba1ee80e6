// File: cli/dashboard/charts.js
//
// The three curves of the dashboard (loss with the held-out loss, tokens/s, world size), drawn as
// SVG into #loss-chart, #tps-chart and #world-chart over the steps, with the resize, evict and
// readmit markers, and the hover read-out (#tooltip) shared by the three. renderCharts(data) draws
// them from an /api/job response ({} draws empty charts); `charts` and `chartOrder` name the
// charts' SVG elements (dashboard.js redraws when their boxes change size). Each curve's
// path.curve carries data-points and data-last-step; each marker line its data-step and
// data-world-size (resize) or data-node.

import { DASH, $, str, isNum, el, sv, clear, hhmmss, group3, compact, fmtLoss, fmtLr, eventTime } from './format.js';

var series = [];          // plotted samples: one per step, sorted by step

// ------------------------------------------------------------------ scales
function niceStep(span, n) {
  var raw = span / Math.max(1, n);
  var p = Math.pow(10, Math.floor(Math.log10(raw)));
  var f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}
// Returns {lo, hi, ticks, step} covering [lo, hi] with about n nice ticks.
function niceDomain(lo, hi, n, integer, snap) {
  if (!(hi > lo)) { var c = lo; var d = Math.abs(c) * 0.1 || 1; lo = c - d; hi = c + d; }
  var st = niceStep(hi - lo, n);
  if (integer) st = Math.max(1, Math.round(st));
  if (snap) { lo = Math.floor(lo / st + 1e-9) * st; hi = Math.ceil(hi / st - 1e-9) * st; }
  var ticks = [];
  for (var v = Math.ceil(lo / st - 1e-9) * st; v <= hi + st * 1e-9; v += st) ticks.push(+v.toFixed(10));
  return { lo: lo, hi: hi, ticks: ticks, step: st };
}
function tickLabel(v, st) {
  if (Math.abs(v) >= 1e4 || (st >= 1000 && v !== 0)) return compact(v);
  var dec = Math.max(0, Math.min(6, -Math.floor(Math.log10(st) + 1e-9)));
  return v.toFixed(dec);
}

// ------------------------------------------------------------------ charts
export var charts = {
  loss: { svg: $('loss-chart'), key: 'loss', key2: 'eval_loss', kind: 'line', zero: false, integer: false },
  tps: { svg: $('tps-chart'), key: 'tokens_per_s', kind: 'line', zero: true, integer: false },
  world: { svg: $('world-chart'), key: 'world_size', kind: 'step', zero: true, integer: true }
};
export var chartOrder = ['loss', 'tps', 'world'];
var M = { l: 50, r: 14, t: 8, b: 20 };

// Plot by step: when a step appears more than once (the job rolled back to
// a checkpoint and redid steps), the LATER sample (in arrival order) wins.
// Every chart and the hover read-out use this series.
function buildSeries(samples) {
  var byStep = new Map();
  for (var i = 0; i < samples.length; i++) {
    var s = samples[i];
    if (s && isNum(s.step)) byStep.set(s.step, s);
  }
  return Array.from(byStep.values()).sort(function (a, b) { return a.step - b.step; });
}

// Resize marker: the first sample whose world size differs from the sample
// before it, in ARRIVAL order: a generation whose steps were all redone later
// (a node lost, then back before the next checkpoint) still gets its marker,
// although the curves show the redo. The world size alone decides, not the
// generation: a step rolled forward after a failure is reported under the new
// generation with the world it ran on, so the change of world comes one
// sample after the change of generation.
function resizeMarkers(samples) {
  var ser = samples.filter(function (s) { return s && isNum(s.step); });
  var out = [];
  for (var i = 1; i < ser.length; i++) {
    var a = ser[i - 1], b = ser[i];
    if (isNum(b.world_size) && isNum(a.world_size) && a.world_size !== b.world_size) {
      out.push({ cls: 'resize', step: b.step, ws: b.world_size, label: '\u2192 ' + b.world_size });
    }
  }
  return out;
}

// Evict / readmit markers: an event's time_ms maps to the step of the
// sample (any sample, arrival order) nearest in time.
function eventMarkers(events, samples) {
  var timed = [];
  for (var i = 0; i < samples.length; i++) {
    if (samples[i] && isNum(samples[i].time_ms) && isNum(samples[i].step)) timed.push(samples[i]);
  }
  if (!timed.length) return [];
  timed.sort(function (a, b) { return a.time_ms - b.time_ms; });
  var out = [];
  for (var j = 0; j < events.length; j++) {
    var ev = events[j], f = (ev && ev.fields) || {};
    if (f.type !== 'evict' && f.type !== 'readmit') continue;
    var t = eventTime(ev);
    if (t === null) continue;
    var lo = 0, hi = timed.length - 1;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (timed[mid].time_ms < t) lo = mid + 1; else hi = mid; }
    var best = timed[lo];
    if (lo > 0 && Math.abs(timed[lo - 1].time_ms - t) <= Math.abs(best.time_ms - t)) best = timed[lo - 1];
    var node = str(f.node);
    out.push({ cls: f.type, step: best.step, node: node,
               label: (f.type === 'evict' ? '\u2715 ' : '\u21ba ') + (node || f.type) + (f.slot !== undefined && f.slot !== '' ? '/' + f.slot : '') });
  }
  return out;
}

function drawChart(c, ser, xdom, markers) {
  var svg = c.svg;
  var W = svg.clientWidth || svg.getBoundingClientRect().width || 600;
  var H = svg.clientHeight || svg.getBoundingClientRect().height || 180;
  var pw = Math.max(10, W - M.l - M.r), ph = Math.max(10, H - M.t - M.b);
  var gGrid = svg.querySelector('g.grid'), gAxis = svg.querySelector('g.axis');
  var gMark = svg.querySelector('g.markers'), curve = svg.querySelector('path.curve');
  var area = svg.querySelector('path.area');
  clear(gGrid); clear(gAxis); clear(gMark);

  var pts = [];
  for (var i = 0; i < ser.length; i++) {
    var v = ser[i][c.key];
    if (isNum(v)) pts.push([ser[i].step, v]);
  }
  curve.setAttribute('data-points', String(pts.length));
  curve.setAttribute('data-last-step', pts.length ? String(pts[pts.length - 1][0]) : '');
  // A second, sparser series on the same axes (the loss chart's eval loss).
  var pts2 = [];
  for (i = 0; c.key2 && i < ser.length; i++) {
    var v2 = ser[i][c.key2];
    if (isNum(v2)) pts2.push([ser[i].step, v2]);
  }

  // y domain
  var ymin = Infinity, ymax = -Infinity;
  var all = pts.concat(pts2);
  for (i = 0; i < all.length; i++) { if (all[i][1] < ymin) ymin = all[i][1]; if (all[i][1] > ymax) ymax = all[i][1]; }
  if (!pts.length) { ymin = 0; ymax = c.integer ? 8 : 1; }
  if (c.zero) ymin = Math.min(0, ymin);
  if (c.integer) ymax = ymax + 1;
  else if (!c.zero) { var padY = (ymax - ymin) * 0.06; ymin -= padY; ymax += padY; }
  else ymax = ymax * 1.08;
  var yd = niceDomain(ymin, ymax, Math.max(2, Math.min(5, Math.floor(ph / 36))), c.integer, true);
  if (!c.zero && ymin >= 0 && yd.lo < 0) { yd = niceDomain(0, yd.hi, Math.max(2, Math.min(5, Math.floor(ph / 36))), c.integer, true); }

  var x0 = xdom.lo, x1 = xdom.hi;
  function sx(x) { return M.l + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * pw; }
  function sy(y) { return M.t + ph - (y - yd.lo) / (yd.hi - yd.lo) * ph; }
  c.geom = { sx: sx, sy: sy, W: W, H: H, pw: pw, ph: ph, x0: x0, x1: x1 };

  // grid + y labels (none while there is nothing to plot)
  for (i = 0; pts.length && i < yd.ticks.length; i++) {
    var ty = Math.round(sy(yd.ticks[i])) + 0.5;
    gGrid.appendChild(sv('line', { x1: M.l, x2: M.l + pw, y1: ty, y2: ty }));
    gAxis.appendChild(sv('text', { x: M.l - 7, y: ty + 3.5, 'text-anchor': 'end' }, tickLabel(yd.ticks[i], yd.step)));
  }
  // x labels
  for (i = 0; ser.length && i < xdom.ticks.length; i++) {
    var tx = Math.round(sx(xdom.ticks[i])) + 0.5;
    gGrid.appendChild(sv('line', { x1: tx, x2: tx, y1: M.t, y2: M.t + ph, 'stroke-opacity': '0.5' }));
    var tl = String(xdom.ticks[i]);
    var anchor = (tx + tl.length * 3.5 > W - 1) ? 'end' : 'middle';
    gAxis.appendChild(sv('text', { x: anchor === 'end' ? W - 1 : tx, y: M.t + ph + 14, 'text-anchor': anchor }, tl));
  }
  gAxis.appendChild(sv('line', { x1: M.l, x2: M.l + pw, y1: M.t + ph + 0.5, y2: M.t + ph + 0.5 }));

  // curve + area
  var d = '', a = '';
  if (pts.length) {
    var px, py, prevY = null;
    for (i = 0; i < pts.length; i++) {
      px = sx(pts[i][0]).toFixed(1); py = sy(pts[i][1]).toFixed(1);
      if (i === 0) d = 'M' + px + ' ' + py;
      else if (c.kind === 'step') d += 'H' + px + (py !== prevY ? 'V' + py : '');
      else d += 'L' + px + ' ' + py;
      prevY = py;
    }
    if (pts.length === 1) d += 'h0.01';  // a lone point still renders (round cap)
    var base = sy(Math.max(yd.lo, Math.min(yd.hi, c.zero ? 0 : yd.lo))).toFixed(1);
    a = d + 'V' + base + 'H' + sx(pts[0][0]).toFixed(1) + 'Z';
  } else {
    gAxis.appendChild(sv('text', { 'class': 'empty', x: M.l + pw / 2, y: M.t + ph / 2 + 4, 'text-anchor': 'middle' },
                         'no samples yet'));
  }
  curve.setAttribute('d', d);
  area.setAttribute('d', a);
  var curve2 = svg.querySelector('path.curve2');
  if (curve2) {
    var d2 = '';
    for (i = 0; i < pts2.length; i++) d2 += (i ? 'L' : 'M') + sx(pts2[i][0]).toFixed(1) + ' ' + sy(pts2[i][1]).toFixed(1);
    if (pts2.length === 1) d2 += 'h0.01';
    curve2.setAttribute('d', d2);
    curve2.setAttribute('data-points', String(pts2.length));
  }

  // markers: vertical lines; labels stacked in lanes to avoid overlap
  var sorted = markers.slice().sort(function (p, q) { return p.step - q.step; });
  var lanes = [];
  for (i = 0; i < sorted.length; i++) {
    var m = sorted[i];
    if (m.step < x0 || m.step > x1) continue;
    var mx = Math.round(sx(m.step)) + 0.5;
    var attrs = { 'class': 'marker ' + m.cls, x1: mx, x2: mx, y1: M.t, y2: M.t + ph, 'data-step': String(m.step) };
    if (m.cls === 'resize') attrs['data-world-size'] = String(m.ws);
    else attrs['data-node'] = m.node;
    var line = sv('line', attrs);
    var tip = m.cls + ' at step ' + m.step + (m.cls === 'resize' ? ': world size ' + m.ws : ': ' + m.node);
    line.appendChild(sv('title', null, tip));
    gMark.appendChild(line);
    var w = m.label.length * 6.3 + 8;
    var anchorEnd = mx + w > M.l + pw;
    var left = anchorEnd ? mx - w : mx;
    var lane = 0;
    while (lane < lanes.length && lanes[lane] > left) lane++;
    if (lane > 3) continue;          // too crowded: line only
    lanes[lane] = left + w;
    gMark.appendChild(sv('text', { 'class': 'marker-label ' + m.cls, x: anchorEnd ? mx - 4 : mx + 4,
                                   y: M.t + 11 + lane * 13, 'text-anchor': anchorEnd ? 'end' : 'start' }, m.label));
  }
}

export function renderCharts(data) {
  var samples = Array.isArray(data && data.samples) ? data.samples : [];
  var events = Array.isArray(data && data.events) ? data.events : [];
  series = buildSeries(samples);
  var markers = resizeMarkers(samples).concat(eventMarkers(events, samples));
  var lo = series.length ? series[0].step : 0;
  var hi = series.length ? series[series.length - 1].step : 10;
  if (hi <= lo) { hi = lo + 1; }
  var plotW = ((charts.loss.svg.clientWidth || 600) - M.l - M.r);
  var xt = niceDomain(lo, hi, Math.max(2, Math.min(10, Math.floor(plotW / 80))), true, false);
  var xdom = { lo: lo, hi: hi, ticks: xt.ticks.filter(function (t) { return t >= lo && t <= hi; }) };
  for (var i = 0; i < chartOrder.length; i++) drawChart(charts[chartOrder[i]], series, xdom, markers);
  hoverAt(hoverStep);
}

// ----------------------------------------------------------- hover readout
var hoverStep = null;
var tooltip = $('tooltip');
function nearest(step) {
  if (!series.length) return null;
  var lo = 0, hi = series.length - 1;
  while (lo < hi) { var mid = (lo + hi) >> 1; if (series[mid].step < step) lo = mid + 1; else hi = mid; }
  var b = series[lo];
  if (lo > 0 && Math.abs(series[lo - 1].step - step) <= Math.abs(b.step - step)) b = series[lo - 1];
  return b;
}
function hoverAt(step, clientX, clientY) {
  var s = step === null ? null : nearest(step);
  for (var i = 0; i < chartOrder.length; i++) {
    var c = charts[chartOrder[i]], g = c.svg.querySelector('g.hover-g');
    clear(g);
    if (!s || !c.geom) continue;
    var x = Math.round(c.geom.sx(s.step)) + 0.5;
    g.appendChild(sv('line', { 'class': 'hover', x1: x, x2: x, y1: M.t, y2: M.t + c.geom.ph }));
    var v = s[c.key];
    if (isNum(v)) {
      var color = getComputedStyle(c.svg.querySelector('path.curve')).stroke;
      g.appendChild(sv('circle', { 'class': 'hover-dot', cx: c.geom.sx(s.step), cy: c.geom.sy(v), r: 3.5, fill: color }));
    }
  }
  if (!s) { tooltip.hidden = true; return; }
  if (clientX === undefined) return;
  clear(tooltip);
  tooltip.appendChild(el('div', 'tt-h', 'step ' + s.step));
  var rows = [['loss', fmtLoss(s.loss) || DASH], ['tokens/s', isNum(s.tokens_per_s) ? group3(s.tokens_per_s) : DASH],
              ['step time', isNum(s.step_ms) ? Math.round(s.step_ms) + ' ms' : DASH], ['lr', fmtLr(s.lr) || DASH],
              ['world size', str(s.world_size) || DASH], ['generation', str(s.generation) || DASH],
              ['time (UTC)', hhmmss(s.time_ms)]];
  for (var r = 0; r < rows.length; r++) {
    var row = el('div', 'tt-r');
    row.appendChild(el('span', null, rows[r][0]));
    row.appendChild(el('span', null, rows[r][1]));
    tooltip.appendChild(row);
  }
  tooltip.hidden = false;
  var tw = tooltip.offsetWidth, th = tooltip.offsetHeight;
  var left = clientX + 14, top = clientY + 14;
  if (left + tw > window.innerWidth - 4) left = clientX - tw - 14;
  if (top + th > window.innerHeight - 4) top = clientY - th - 14;
  tooltip.style.left = Math.max(4, left) + 'px';
  tooltip.style.top = Math.max(4, top) + 'px';
}
chartOrder.forEach(function (k) {
  var c = charts[k];
  c.svg.addEventListener('mousemove', function (e) {
    if (!c.geom || !series.length) return;
    var r = c.svg.getBoundingClientRect();
    var x = e.clientX - r.left;
    var g = c.geom;
    var f = Math.max(0, Math.min(1, (x - M.l) / g.pw));
    hoverStep = g.x0 + f * (g.x1 - g.x0);
    hoverAt(hoverStep, e.clientX, e.clientY);
  });
  c.svg.addEventListener('mouseleave', function () { hoverStep = null; hoverAt(null); });
});
