// File: cli/dashboard/format.js
//
// The dashboard's helpers, shared by its other scripts: text and number formatting (times in UTC,
// thousands, compact k/M/G, loss, learning rate, ages), the colour class of a status or an event
// type, an event's time, and small DOM builders (el: an HTML element, sv: an SVG one; setText and
// setSub fill a figure and its subtitle, a dash or a blank when empty). No state, no side effects
// on load.

var SVGNS = 'http://www.w3.org/2000/svg';
export var DASH = '\u2014';
export var MID = ' \u00b7 ';

export function $(id) { return document.getElementById(id); }

// ---------------------------------------------------------------- helpers
export function str(v) { return (v === undefined || v === null) ? '' : String(v); }
export function isNum(v) { return typeof v === 'number' && isFinite(v); }
export function setText(id, text) {
  var el = $(id);
  var t = (text === undefined || text === null || text === '') ? DASH : String(text);
  if (el.textContent !== t) el.textContent = t;
}
export function setSub(id, text) {
  var el = $(id);
  var t = text ? String(text) : '\u00a0';
  if (el.textContent !== t) el.textContent = t;
  el.title = text ? String(text) : '';
}
export function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
export function sv(tag, attrs, text) {
  var e = document.createElementNS(SVGNS, tag);
  if (attrs) for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
function pad2(n) { return (n < 10 ? '0' : '') + n; }
export function hhmmss(ms) {
  if (!isNum(ms)) return '--:--:--';
  var d = new Date(ms);
  return pad2(d.getUTCHours()) + ':' + pad2(d.getUTCMinutes()) + ':' + pad2(d.getUTCSeconds());
}
export function group3(n) {
  var s = String(Math.round(Math.abs(n)));
  var out = '';
  while (s.length > 3) { out = ',' + s.slice(-3) + out; s = s.slice(0, -3); }
  return (n < 0 ? '-' : '') + s + out;
}
export function compact(v) {
  if (!isNum(v)) return DASH;
  var a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 1 : 2) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 1 : 2) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
  return group3(v);
}
export function fmtLoss(v) { return isNum(v) ? v.toFixed(4) : ''; }
export function fmtLr(v) {
  if (!isNum(v)) return '';
  if (v === 0) return '0';
  if (Math.abs(v) >= 0.01 && Math.abs(v) < 1000) return String(+v.toPrecision(3));
  return v.toExponential(1).replace('.0e', 'e').replace('e-', 'e\u2212');
}
export function fmtAge(s) {
  if (!isNum(s)) return '';
  if (s < 10) return s.toFixed(1) + 's';
  if (s < 120) return Math.round(s) + 's';
  if (s < 7200) return Math.round(s / 60) + 'min';
  return (s / 3600).toFixed(1) + 'h';
}
export function statusClass(s) {
  switch (s) {
    case 'running': return 'good';
    case 'completed': return 'info';
    case 'error': case 'failed': return 'bad';
    case 'stopped': case null: case undefined: case '': return 'none';
    default: return 'warn';
  }
}
export function eventClass(t) {
  switch (t) {
    case 'join': case 'recovered': case 'readmit': case 'completed': case 'continue': return 'good';
    case 'resize': case 'leader': case 'checkpoint': case 'restore': return 'info';
    case 'leave': case 'straggler': case 'evict_refused': case 'stopped': return 'warn';
    case 'evict': case 'error': return 'bad';
    default: return 'none';
  }
}
export function eventTime(ev) {
  var f = (ev && ev.fields) || {};
  var t = parseInt(f.time_ms, 10);
  if (!isFinite(t) && ev && typeof ev.id === 'string') t = parseInt(ev.id.split('-')[0], 10);
  return isFinite(t) ? t : null;
}
