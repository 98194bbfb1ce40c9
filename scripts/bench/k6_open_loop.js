// Open-loop (constant arrival rate) POST load for scripts/bench/harness.py open_loop (compare.py --open-loop-rate,
// knee.py). Env: REQS (path of a JSON file [{"url": ..., "body": "..."}, ...]), RATE (requests/s), DURATION (e.g.
// "10s"), MAX_VUS. Run: k6 run --no-usage-report --summary-export out.json -e REQS=... -e RATE=60 k6_open_loop.js
// Counting as every benchmark counts (scripts/drills/common.py answer_kind): a 200 whose body says "degraded": true
// came from a fallback model; primary_answers / primary_req_duration count and time the others, degraded_answers /
// degraded_req_duration those, apart.
import http from 'k6/http';
import { Counter, Trend } from 'k6/metrics';

const reqs = JSON.parse(open(__ENV.REQS));
const DEGRADED = /"degraded"\s*:\s*true/;
const primaryAnswers = new Counter('primary_answers');
const degradedAnswers = new Counter('degraded_answers');
const primaryDuration = new Trend('primary_req_duration', true);
const degradedDuration = new Trend('degraded_req_duration', true);

export const options = {
  discardResponseBodies: true,  // but for the answers' own (responseType below): the degraded flag is in them
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
  const res = http.post(r.url, r.body, { headers: { 'content-type': 'application/json' }, timeout: '30s',
                                         responseType: 'text' });
  if (res.status !== 200) return;
  if (DEGRADED.test(res.body || '')) {
    degradedAnswers.add(1);
    degradedDuration.add(res.timings.duration);
  } else {
    primaryAnswers.add(1);
    primaryDuration.add(res.timings.duration);
  }
}
