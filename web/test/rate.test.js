// A counter's rate as the dashboard shows it (rate.js): decayed from its instant, 0 when small.
import { Timestamp } from "firebase/firestore";
import { expect, test } from "vitest";
import { FALL_TAU_S, rateNow } from "../src/rate.js";

const NOW = Date.parse("2025-03-01T12:00:00Z");
const ago = (s) => Timestamp.fromMillis(NOW - s * 1000);

test("a rate falls from its instant as the rollup's does, and shows 0 below 0.05", () => {
  expect(rateNow({ rate: 4, rate_at: ago(0) }, NOW)).toBe(4);
  expect(rateNow({ rate: 4, rate_at: ago(FALL_TAU_S) }, NOW)).toBeCloseTo(4 / Math.E, 6);
  expect(rateNow({ rate: 4, rate_at: ago(43) }, NOW)).toBeGreaterThan(0.05);
  expect(rateNow({ rate: 4, rate_at: ago(44) }, NOW)).toBe(0);
});

test("a document from before rate_at falls from updated_at; without either, as published", () => {
  expect(rateNow({ rate: 4, updated_at: ago(FALL_TAU_S) }, NOW)).toBeCloseTo(4 / Math.E, 6);
  expect(rateNow({ rate: 4, rate_at: ago(0), updated_at: ago(60) }, NOW)).toBe(4);
  expect(rateNow({ rate: 2.5 }, NOW)).toBe(2.5);
  expect(rateNow({ rate: 2.5, rate_at: ago(-5) }, NOW)).toBe(2.5);
  expect(rateNow({}, NOW)).toBe(0);
  expect(rateNow(undefined, NOW)).toBe(0);
});
