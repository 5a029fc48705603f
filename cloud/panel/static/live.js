// The panel's live updates (issue 29), owned by the live lane.
//
// Contract for every page script: this file opens one EventSource on
// /panel/live (with the page's subscription from <body data-live="...">,
// e.g. "device=ID") and turns each server-sent event of type T into a DOM
// event "live:T" on document.body, whose detail is the event's data
// parsed as JSON:
//   live:fleet   {devices: [DeviceGlance...], summary: FleetSummary}  changed devices of the organization
//   live:device  DeviceGlance                                         the subscribed device changed (status, last seen, metrics, alerts, channels, points)
//   live:alerts  {}                                                   an alert of the organization opened, changed or closed
//   live:events  {device: id}                                         new events of the subscribed device
//   live:state   {state: "live" | "reconnecting"}                     the connection's state
// htmx fragments refresh with hx-trigger="live:alerts from:body"; scripts
// use document.body.addEventListener("live:device", e => ...).
"use strict";
