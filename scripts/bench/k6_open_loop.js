// Open-loop (constant arrival rate) POST load for scripts/bench/compare.py --open-loop-rate.
// Env: REQS (path of a JSON file [{"url": ..., "body": "..."}, ...]), RATE (requests/s), DURATION (e.g. "10s"),
// MAX_VUS. Run: k6 run --no-usage-report --summary-export out.json -e REQS=... -e RATE=60 k6_open_loop.js
import http from 'k6/http';

const reqs = JSON.parse(open(__ENV.REQS));

export const options = {
  discardResponseBodies: true,
  summaryTrendStats: ['p(50)', 'p(90)', 'p(99)', 'max', 'avg'],
  scenarios: {
    open: {
      executor: 'constant-arrival-rate',
      rate: parseInt(__ENV.RATE || '60'),
      timeUnit: '1s',
      duration: __ENV.DURATION || '10s',
      preAllocatedVUs: 64,
      maxVUs: parseInt(__ENV.MAX_VUS || '256'),
    },
  },
};

export default function () {
  const r = reqs[Math.floor(Math.random() * reqs.length)];
  http.post(r.url, r.body, { headers: { 'content-type': 'application/json' }, timeout: '30s' });
}
