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
