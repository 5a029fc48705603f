package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestListPagesFollowEveryCommit: the hot lists are served from a cache of
// rendered pages, which must never answer with a page older than the
// store: a change by this relay's own writer and one by another process on
// the same file (the admin CLI) both show on the very next request, and
// the two organizations never see each other's pages.
func TestListPagesFollowEveryCommit(t *testing.T) { stores.Run(t, testListPagesFollowEveryCommit) }

func testListPagesFollowEveryCommit(t *testing.T, open storetest.Opener) {
	ctx := context.Background()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	e.device(e.orgB.ID, "IG-500")
	names := func(key, path string) []string {
		t.Helper()
		r := e.get(path, key)
		r.want(t, 200, "")
		var l struct {
			Data []struct {
				Name    string `json:"name"`
				Status  string `json:"status"`
				Message string `json:"message"`
				State   string `json:"state"`
			} `json:"data"`
		}
		r.decode(t, &l)
		var out []string
		for _, x := range l.Data {
			out = append(out, x.Name+x.Status+x.Message+x.State)
		}
		return out
	}
	for i := 0; i < 3; i++ { // cached after the first
		if got := names(e.keyA, "/devices"); len(got) != 1 || got[0] != "gw-1PROVISIONING" {
			t.Fatalf("org A devices: %v", got)
		}
		if got := names(e.keyB, "/devices"); len(got) != 1 || got[0] != "gw-2PROVISIONING" {
			t.Fatalf("org B devices: %v", got)
		}
	}
	// This relay's writer.
	storetest.Connect(t, e.s.Agent, e.agent(d.ID), time.Now(), protocol.Hello{AgentVersion: "1.0.0"})
	if got := names(e.keyA, "/devices"); len(got) != 1 || got[0] != "gw-1ONLINE" {
		t.Fatalf("after a status change: %v", got)
	}
	// Another process's handle on the same database.
	cli := e.s.Reopen(t)
	storetest.Offline(t, cli.Agent, e.agent(d.ID), time.Now(), time.Minute)
	if got := names(e.keyA, "/devices"); len(got) != 1 || got[0] != "gw-1OFFLINE" {
		t.Fatalf("after a status change by another handle: %v", got)
	}

	a := e.alert(d.ID, "high_cpu", resource.AlertActive, time.Now())
	for i := 0; i < 2; i++ {
		if got := names(e.keyA, "/alerts"); len(got) != 1 || got[0] != "high_cpu on "+d.ID+"ACTIVE" {
			t.Fatalf("alerts: %v", got)
		}
		if got := names(e.keyB, "/alerts"); len(got) != 0 {
			t.Fatalf("org B sees org A's alerts: %v", got)
		}
	}
	if _, err := cli.Store.Alerts().Acknowledge(ctx, e.orgA.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := names(e.keyA, "/alerts"); len(got) != 0 {
		t.Fatalf("ACTIVE alerts after an acknowledge by another handle: %v", got)
	}
	if got := names(e.keyA, "/alerts?state=ACKNOWLEDGED"); len(got) != 1 {
		t.Fatalf("ACKNOWLEDGED alerts: %v", got)
	}
}

// TestRepeatedQueriesAnswerAsTheFirst: the hot lists keep the filter they
// parsed from each query string; asked again, in any order and after
// other queries, every query answers what it answered the first time,
// a bad one its 400 with the same message.
func TestRepeatedQueriesAnswerAsTheFirst(t *testing.T) {
	stores.Run(t, testRepeatedQueriesAnswerAsTheFirst)
}

func testRepeatedQueriesAnswerAsTheFirst(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	for i := 0; i < 3; i++ {
		d := e.device(e.orgA.ID, "IG-500")
		e.alert(d.ID, "high_cpu", resource.AlertActive, time.Now())
	}
	paths := []string{
		"/devices", "/devices?limit=2", "/devices?limit=0", "/devices?limit=2&limit=3", "/devices?status=ONLINE",
		"/devices?status=online", "/devices?tag=a&tag=b", "/devices?tag=B", "/devices?nope=1", "/devices?limit=1&status=PROVISIONING",
		"/devices?status=PROVISIONING&limit=1", "/devices?cursor=x",
		"/alerts", "/alerts?limit=1", "/alerts?state=RESOLVED", "/alerts?state=nope", "/alerts?deviceId=bad", "/alerts?severity=ERROR",
	}
	first := map[string]resp{}
	for round := 0; round < 3; round++ {
		for _, p := range paths {
			r := e.get(p, e.keyA)
			f, seen := first[p]
			if !seen {
				first[p] = r
				continue
			}
			if r.status != f.status || string(r.body) != string(f.body) {
				t.Errorf("round %d, %s: %d %s; the first time %d %s", round, p, r.status, r.body, f.status, f.body)
			}
		}
	}
	for _, p := range []string{"/devices?limit=0", "/devices?nope=1", "/alerts?state=nope"} {
		if first[p].status != 400 {
			t.Errorf("%s: %d, want 400", p, first[p].status)
		}
	}
	if first["/devices?limit=2"].status != 200 || first["/devices?limit=1&status=PROVISIONING"].status != 200 {
		t.Errorf("good queries refused: %s / %s", first["/devices?limit=2"].body, first["/devices?limit=1&status=PROVISIONING"].body)
	}
}
