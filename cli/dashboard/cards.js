// File: cli/dashboard/cards.js
//
// The dashboard's cards, each filled from an /api/job response: the summary (#summary, with its
// data-job, data-status, data-generation, data-world-size, data-step and data-loss; the figures,
// the job's ETTR beside the loss (#ettr, with data-ettr),
// the store's primary, the last checkpoint, the page's title), the members (#members, a tr.member
// per node with data-node, data-ranks, data-lease, and per-rank speeds), the evictions
// (#evictions), the pending requests, standby, settings and cordons (#control: li.request,
// li.standby (also li.preparing while its workers set up), li.setting, li.cordon, li.in-force)
// and the events (#events, an li.event per event, newest first, new ones flashed). The page only
// shows them: it cannot act.

import { DASH, MID, $, str, isNum, setText, setSub, el, clear, hhmmss, group3, compact, fmtLoss, fmtLr, fmtAge, statusClass, eventClass, eventTime } from './format.js';

var seenEvents = null;    // ids of events already shown (to flash new ones)

// ----------------------------------------------------------------- summary
export function renderSummary(d) {
  var st = (d && d.state) || {};
  var sum = $('summary');
  var attrs = { job: d.job, status: st.status, generation: d.generation, worldSize: d.world_size,
                step: st.step, loss: st.loss };
  for (var k in attrs) sum.dataset[k] = str(attrs[k]);

  setText('job-name', d.job);
  var status = st.status || d.generation_status || (d.exists === false ? 'not found' : '');
  var pill = $('status-pill');
  pill.textContent = status || 'unknown';
  pill.className = 'pill ' + (d.exists === false ? 'warn' : statusClass(status));

  // The store's primary and failovers, as the agents recorded them (absent before any record).
  var store = (d.store && typeof d.store === 'object') ? d.store : null;
  var storeEl = $('store');
  var failovers = store && isNum(store.failovers) ? store.failovers : 0;
  storeEl.dataset.primary = store ? str(store.primary) : '';
  storeEl.dataset.failovers = store ? str(failovers) : '';
  storeEl.hidden = !store || !store.primary;
  storeEl.textContent = store ? 'redis primary ' + str(store.primary) + MID + failovers + ' failover' + (failovers === 1 ? '' : 's') : '';
  storeEl.className = 'store mono' + (failovers > 0 ? ' moved' : '');

  setText('kpi-generation', d.generation);
  setSub('kpi-generation-s', d.generation_status ? d.generation_status : '');
  setText('kpi-world', d.world_size);
  var members = Array.isArray(d.members) ? d.members : [];
  var alive = members.filter(function (m) { return m && m.lease; }).length;
  setSub('kpi-world-s', members.length ? members.length + ' node' + (members.length === 1 ? '' : 's') + ', ' + alive + ' alive' : '');
  setText('kpi-step', isNum(st.step) ? group3(st.step) : st.step);
  var stepSub = [];
  if (isNum(st.tokens)) stepSub.push(compact(st.tokens) + ' tokens');
  setSub('kpi-step-s', stepSub.join(MID));
  setText('kpi-loss', fmtLoss(st.loss));
  var lossSub = [];
  if (isNum(st.eval_loss)) lossSub.push('eval ' + fmtLoss(st.eval_loss) + (isNum(st.eval_step) ? ' @ ' + group3(st.eval_step) : ''));
  if (isNum(st.grad_norm)) lossSub.push('grad norm ' + st.grad_norm.toFixed(2));
  if (isNum(st.lr)) lossSub.push('lr ' + fmtLr(st.lr));
  setSub('kpi-loss-s', lossSub.join(MID));
  setText('kpi-tps', isNum(st.tokens_per_s) ? group3(st.tokens_per_s) : '');
  setSub('kpi-tps-s', isNum(st.step_ms) ? Math.round(st.step_ms) + ' ms / step' : '');

  var leader = d.leader ? String(d.leader) : '';
  var slash = leader.indexOf('/');
  setText('kpi-leader', slash > 0 ? leader.slice(0, slash) : leader);
  setSub('kpi-leader-s', slash > 0 ? leader.slice(slash + 1) : '');
  $('kpi-leader').title = leader;

  var ck = $('checkpoint');
  ck.dataset.step = str(st.last_ckpt_step);
  setText('kpi-ckpt', isNum(st.last_ckpt_step) ? 'step ' + group3(st.last_ckpt_step) : st.last_ckpt_step);
  setSub('kpi-ckpt-s', st.last_ckpt_path || '');

  $('val-loss').textContent = fmtLoss(st.loss);
  // The job's ETTR beside the loss (api: goodput, elastic/goodput.h), with its full text as a hint.
  var g = (d.goodput && typeof d.goodput === 'object' && isNum(d.goodput.ettr)) ? d.goodput : null;
  var ettr = $('ettr');
  ettr.hidden = !g;
  ettr.dataset.ettr = g ? g.ettr.toFixed(4) : '';
  ettr.textContent = g ? 'ETTR ' + g.ettr.toFixed(2) : '';
  ettr.title = g && g.text ? g.text : ettr.title;
  $('val-tps').textContent = isNum(st.tokens_per_s) ? group3(st.tokens_per_s) : '';
  $('aux-tps').textContent = isNum(st.step_ms) ? Math.round(st.step_ms) + ' ms / step' : '';
  $('val-world').textContent = str(d.world_size);
  $('aux-world').textContent = isNum(d.generation) ? 'generation ' + d.generation + (d.generation_status ? ' (' + d.generation_status + ')' : '') : '';

  var title = str(d.job) || 'hdp';
  if (status) title += ' - ' + status;
  if (isNum(st.step)) title += ' - step ' + st.step;
  document.title = title + ' | hdp dashboard';
}

// ----------------------------------------------------------------- members
export function renderMembers(d) {
  var st = (d && d.state) || {};
  var members = (Array.isArray(d.members) ? d.members : []).filter(function (m) { return m && typeof m === 'object'; });
  // Per-rank speeds belong to a generation: only show them when the state
  // was written for the current one.
  var speedsValid = Array.isArray(st.speeds) && st.generation !== undefined && st.generation !== null &&
                    st.generation === d.generation;
  members = members.slice().sort(function (a, b) {
    var ra = isNum(a.first_rank) ? a.first_rank : Infinity, rb = isNum(b.first_rank) ? b.first_rank : Infinity;
    if (ra !== rb) return ra < rb ? -1 : 1;
    return str(a.node) < str(b.node) ? -1 : str(a.node) > str(b.node) ? 1 : 0;
  });
  var maxSlots = 1;
  members.forEach(function (m) { if (Array.isArray(m.slots) && m.slots.length > maxSlots) maxSlots = m.slots.length; });
  $('speed-h').colSpan = maxSlots;
  $('members').classList.toggle('compact', maxSlots > 3);

  var leaderNode = '', leaderInc = '';
  if (d.leader) { var p = String(d.leader).split('/'); leaderNode = p[0]; leaderInc = p.slice(1).join('/'); }

  var tbody = $('members').tBodies[0];
  var frag = document.createDocumentFragment();
  var slow = 0;
  members.forEach(function (m) {
    var tr = el('tr', 'member');
    var slots = Array.isArray(m.slots) ? m.slots : [];
    var hasRanks = isNum(m.first_rank) && slots.length > 0;
    var last = hasRanks ? m.first_rank + slots.length - 1 : null;
    tr.dataset.node = str(m.node);
    tr.dataset.ranks = hasRanks ? m.first_rank + '-' + last : '';
    tr.dataset.lease = m.lease ? 'alive' : 'expired';

    var tdNode = el('td', 'node', str(m.node) || DASH);
    if (leaderNode && str(m.node) === leaderNode && (!leaderInc || str(m.incarnation) === leaderInc)) {
      tdNode.appendChild(el('span', 'badge', 'leader'));
    }
    tr.appendChild(tdNode);
    var inc = str(m.incarnation);
    var tdInc = el('td', 'inc', inc ? inc.slice(0, 8) : DASH);
    tdInc.title = inc;
    tr.appendChild(tdInc);
    tr.appendChild(el('td', 'host', str(m.host) || DASH));
    tr.appendChild(el('td', 'ranks', hasRanks ? (slots.length > 1 ? m.first_rank + '\u2013' + last : String(m.first_rank)) : DASH));

    var tdLease = el('td', 'lease-cell');
    var lease = el('span', 'lease');
    lease.appendChild(el('span', 'dot ' + (m.lease ? 'ok' : 'bad')));
    lease.appendChild(el('span', null, m.lease ? 'alive' : 'expired'));
    if (isNum(m.lease_age_s)) lease.appendChild(el('span', 'age', fmtAge(m.lease_age_s)));
    tdLease.appendChild(lease);
    tr.appendChild(tdLease);

    var n = 0;
    if (hasRanks) {
      for (var i = 0; i < slots.length; i++, n++) {
        var rank = m.first_rank + i;
        var v = speedsValid ? st.speeds[rank] : undefined;
        var td = el('td', 'speed', isNum(v) ? v.toFixed(2) : '-');
        td.dataset.rank = String(rank);
        if (isNum(v) && v < 0.5) { td.classList.add('slow'); slow++; }
        if (!isNum(v)) td.classList.add('na');
        td.title = 'rank ' + rank + ' (slot ' + str(slots[i]) + ')';
        tr.appendChild(td);
      }
    }
    for (; n < maxSlots; n++) tr.appendChild(el('td', 'pad'));
    frag.appendChild(tr);
  });
  if (!members.length) {
    var tr0 = el('tr', 'empty');
    var td0 = el('td', 'empty-note', d.exists === false ? 'no job' : 'no members');
    td0.colSpan = 5 + maxSlots;
    tr0.appendChild(td0);
    frag.appendChild(tr0);
  }
  clear(tbody);
  tbody.appendChild(frag);
  var alive = members.filter(function (m) { return m.lease; }).length;
  $('members-aux').textContent = members.length ? (members.length + ' nodes' + MID + alive + ' alive' +
    (slow ? MID + slow + ' slow rank' + (slow === 1 ? '' : 's') : '') + (speedsValid ? '' : (Array.isArray(st.speeds) ? MID + 'speeds stale' : ''))) : '';
}

// --------------------------------------------------------------- evictions
export function renderEvictions(d) {
  var list = (Array.isArray(d.evictions) ? d.evictions : []).filter(function (e) { return e && typeof e === 'object'; });
  var now = isNum(d.now_ms) ? d.now_ms : Date.now();
  list = list.slice().sort(function (a, b) {
    if (!!a.active !== !!b.active) return a.active ? -1 : 1;
    return (b.until_ms || 0) - (a.until_ms || 0);
  });
  var ul = $('evictions');
  var frag = document.createDocumentFragment();
  var active = 0;
  list.forEach(function (e) {
    var li = el('li', 'eviction' + (e.active ? ' active' : ' inactive'));
    li.dataset.node = str(e.node);
    li.dataset.slot = str(e.slot);
    li.dataset.active = e.active ? 'true' : 'false';
    var left = isNum(e.until_ms) ? Math.max(0, Math.ceil((e.until_ms - now) / 1000)) : null;
    if (e.active) active++;
    li.dataset.secondsLeft = left === null ? '' : String(left);
    li.appendChild(el('span', 'who', str(e.node) + (e.slot !== undefined && e.slot !== null ? ' slot ' + e.slot : '')));
    var why = [];
    if (e.reason) why.push(String(e.reason));
    if (isNum(e.speed)) why.push('speed ' + e.speed.toFixed(2));
    if (isNum(e.count)) why.push('count ' + e.count);
    li.appendChild(el('span', 'why', why.join(MID)));
    li.appendChild(el('span', 'left', e.active ? (left === null ? 'active' : left + ' s left')
                                              : (e.readmitted ? 'readmitted' : 'expired')));
    frag.appendChild(li);
  });
  if (!list.length) frag.appendChild(el('li', 'empty-note', 'no evictions'));
  clear(ul);
  ul.appendChild(frag);
  $('evictions-aux').textContent = list.length ? active + ' active cool-down' + (active === 1 ? '' : 's') : '';
}

// ------------------------------------------------- pending requests, cordons
// What `hdp drain/stop/checkpoint` asked for and the job has not yet done, and the nodes `hdp
// cordon` keeps out (docs/operations.md). The page only shows them: it cannot act.
export function renderControl(d) {
  var requests = (Array.isArray(d.requests) ? d.requests : []).filter(function (r) { return r && typeof r === 'object'; });
  var cordons = (Array.isArray(d.cordons) ? d.cordons : []).filter(function (c) { return c && typeof c === 'object'; });
  var now = isNum(d.now_ms) ? d.now_ms : Date.now();
  var ul = $('control');
  var frag = document.createDocumentFragment();
  requests.forEach(function (r) {
    var li = el('li', 'request');
    li.dataset.op = str(r.op);
    li.dataset.node = str(r.node);
    li.appendChild(el('span', 'who', str(r.op) + (r.node ? ' ' + str(r.node) : '')));
    li.appendChild(el('span', 'why', 'by ' + str(r.by)));
    li.appendChild(el('span', 'left', isNum(r.at_ms) ? 'pending ' + fmtAge(Math.max(0, (now - r.at_ms) / 1000)) : 'pending'));
    frag.appendChild(li);
  });
  var st = d.state || {};
  var standby = typeof st.standby === 'string' && st.standby ? st.standby.split(',') : [];
  // Those of them whose workers are still setting up (the state's `preparing`): not ready yet.
  var preparing = typeof st.preparing === 'string' && st.preparing ? st.preparing.split(',') : [];
  standby.forEach(function (node) {
    var setting = preparing.indexOf(node) >= 0;
    var li = el('li', setting ? 'standby preparing' : 'standby');
    li.dataset.node = node;
    li.appendChild(el('span', 'who', node));
    li.appendChild(el('span', 'why', setting ? 'setting up: joins, or stands by, once its workers are ready'
                                             : 'standby: takes a lost member\u2019s place'));
    li.appendChild(el('span', 'left', ''));
    frag.appendChild(li);
  });
  // Live settings: what `hdp config set` set, and what rank 0 last reported in force.
  var settings = d.settings && typeof d.settings === 'object' ? d.settings : {};
  var inForce = null;
  (Array.isArray(d.events) ? d.events : []).forEach(function (e) {
    if (e && e.fields && e.fields.type === 'settings_applied') inForce = e.fields;
  });
  Object.keys(settings).forEach(function (name) {
    var li = el('li', 'setting');
    li.dataset.name = name;
    li.dataset.value = str(settings[name]);
    li.appendChild(el('span', 'who', name + ' = ' + str(settings[name])));
    li.appendChild(el('span', 'why', 'set with hdp config'));
    li.appendChild(el('span', 'left', inForce ? 'in force from step ' + str(inForce.step) : 'not yet in force'));
    frag.appendChild(li);
  });
  cordons.forEach(function (c) {
    var li = el('li', 'cordon');
    li.dataset.node = str(c.node);
    li.appendChild(el('span', 'who', str(c.node)));
    li.appendChild(el('span', 'why', 'cordoned by ' + str(c.by)));
    li.appendChild(el('span', 'left', isNum(c.at_ms) ? fmtAge(Math.max(0, (now - c.at_ms) / 1000)) + ' ago' : ''));
    frag.appendChild(li);
  });
  // Every value in force, as rank 0 reports it with each step (what the job's flags set, and
  // any change since).
  if (typeof st.settings_in_force === 'string' && st.settings_in_force) {
    var live = el('li', 'in-force');
    live.appendChild(el('span', 'who', 'in force'));
    live.appendChild(el('span', 'why', st.settings_in_force));
    live.appendChild(el('span', 'left', isNum(st.step) ? 'step ' + str(st.step) : ''));
    frag.appendChild(live);
  }
  if (!requests.length && !cordons.length && !standby.length && !Object.keys(settings).length) {
    frag.appendChild(el('li', 'empty-note', 'nothing pending, nothing cordoned, no standby'));
  }
  clear(ul);
  ul.appendChild(frag);
  $('control-aux').textContent = requests.length + ' pending' + MID + standby.length + ' standby' + MID + cordons.length +
                                 ' cordoned' + MID + Object.keys(settings).length + ' set' + MID + 'read-only';
}

// ------------------------------------------------------------------ events
export function renderEvents(d) {
  var events = (Array.isArray(d.events) ? d.events : []).filter(function (e) { return e && typeof e === 'object'; });
  var ul = $('events');
  var frag = document.createDocumentFragment();
  var ids = new Set();
  for (var i = events.length - 1; i >= 0; i--) {   // newest first
    var ev = events[i], f = ev.fields || {};
    var li = el('li', 'event');
    li.dataset.type = str(f.type);
    li.dataset.id = str(ev.id);
    ids.add(str(ev.id));
    if (seenEvents && !seenEvents.has(str(ev.id))) li.classList.add('fresh');
    li.appendChild(el('span', 't', hhmmss(eventTime(ev))));
    li.appendChild(el('span', 'ty ' + eventClass(f.type), str(f.type) || '?'));
    var kv = el('span', 'kv');
    var text = [];
    for (var k in f) {
      if (!Object.prototype.hasOwnProperty.call(f, k) || k === 'type' || k === 'time_ms') continue;
      if (kv.childNodes.length) kv.appendChild(document.createTextNode(' '));
      kv.appendChild(el('b', null, k + '='));
      kv.appendChild(document.createTextNode(str(f[k])));
      text.push(k + '=' + str(f[k]));
    }
    kv.title = text.join(' ');
    li.appendChild(kv);
    frag.appendChild(li);
  }
  if (!events.length) frag.appendChild(el('li', 'empty-note', 'no events'));
  seenEvents = ids;
  clear(ul);
  ul.appendChild(frag);
  $('events-aux').textContent = (events.length ? events.length + ' events' + MID : '') + 'newest first, UTC';
}
