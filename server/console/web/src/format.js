// Formatting of times, durations, ids and event sources, the same on every page.

let skewMs = 0; // server clock minus this browser's clock

// noteServerClock keeps countdowns on the server's clock: deadlines are the server's,
// and an operator's laptop may be minutes off. Differences below the Date header's
// one-second resolution are noise.
export function noteServerClock(resp) {
  const date = Date.parse(resp.headers.get('Date') || '');
  if (Number.isNaN(date)) return;
  const skew = date + 500 - Date.now();
  skewMs = Math.abs(skew) >= 2000 ? skew : 0;
}

export const now = () => Date.now() + skewMs;

export function fmtDuration(ms) {
  const sec = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(sec / 86400), hr = Math.floor((sec % 86400) / 3600);
  const m = Math.floor((sec % 3600) / 60), s = sec % 60;
  const pad = (n) => String(n).padStart(2, '0');
  if (d > 0) return `${d}d ${hr}h`;
  if (hr > 0) return `${hr}h ${pad(m)}m`;
  if (m > 0) return `${m}m ${pad(s)}s`;
  return `${s}s`;
}

// countdown describes a deadline: state running or overdue, the text, the seconds left.
export function countdown(iso) {
  const at = Date.parse(iso || '');
  if (Number.isNaN(at)) return null;
  const left = at - now();
  if (left <= 0) return { state: 'overdue', text: `overdue by ${fmtDuration(-left)}`, seconds: Math.ceil(left / 1000) };
  return { state: 'running', text: `in ${fmtDuration(left)}`, seconds: Math.floor(left / 1000) };
}

export function fmtTime(iso) {
  const t = Date.parse(iso || '');
  if (Number.isNaN(t)) return '';
  const d = new Date(t);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function ago(iso) {
  const t = Date.parse(iso || '');
  if (Number.isNaN(t)) return '';
  return `${fmtDuration(now() - t)} ago`;
}

// sourceText names where an event came from: the Kafka topic, partition and offset; the
// callback's service; or the send endpoint.
export function sourceText(src) {
  if (!src || !src.kind) return '';
  switch (src.kind) {
    case 'kafka': {
      let t = `kafka ${src.topic || '?'}`;
      if (src.partition !== undefined) t += ` partition ${src.partition}`;
      if (src.offset !== undefined) t += ` offset ${src.offset}`;
      return t;
    }
    case 'callback':
      return `callback ${src.service || '?'}`;
    case 'send':
      return 'sent to the execution';
    default:
      return src.kind;
  }
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const pretty = (v) => (v === undefined ? '' : JSON.stringify(v, null, 2));
