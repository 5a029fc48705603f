// The fleet page at a glance (issue 29), owned by the glance lane: it
// applies "live:fleet" events (see live.js) to the table and the overview
// strip, and ticks every <time data-tick> ("last seen 12 s ago").
"use strict";
