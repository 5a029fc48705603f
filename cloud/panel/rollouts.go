package panel

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Rollouts: an agent version rolled out to a scope of devices in cumulative
// waves, watched by wave and by device, paused, resumed or canceled
// (DESIGN.md "Agent updates with staged rollout and automatic rollback").
// Rollouts, Releases and Claims share a second row of navigation.

// rolloutsPageSize is the number of rollouts per page of the list.
const rolloutsPageSize = 50

// maxRolloutRows bounds the devices a rollout's page lists (after its
// filters); the counts cover them all.
const maxRolloutRows = 500

// deviceStates are the per-device states in the order the pages show them.
var deviceStates = []string{resource.RolloutDevicePending, resource.RolloutDeviceDownloading, resource.RolloutDeviceInstalling,
	resource.RolloutDeviceHealthy, resource.RolloutDeviceFailed, resource.RolloutDeviceRolledBack, resource.RolloutDeviceSkipped}

// sayState says a state in words ("rolled_back" is "rolled back").
func sayState(s string) string { return strings.ReplaceAll(s, "_", " ") }

// sayCounts says counts by state in words: "3 healthy · 1 failed".
func sayCounts(counts map[string]int) string {
	var parts []string
	for _, st := range deviceStates {
		if n := counts[st]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+sayState(st))
		}
	}
	if len(parts) == 0 {
		return "no devices"
	}
	return strings.Join(parts, " · ")
}

// sayWaves says cumulative waves: "1 %, 10 %, 100 %".
func sayWaves(waves []int) string {
	out := make([]string, len(waves))
	for i, w := range waves {
		out[i] = strconv.Itoa(w) + " %"
	}
	return strings.Join(out, ", ")
}

// sayRolloutScope says a rollout's scope in words.
func (w *scopeWords) sayRollout(sc resource.RolloutScope) string {
	return w.say(resource.RuleScope{DeviceIDs: sc.DeviceIDs, Tags: sc.Tags})
}

type rolloutRow struct {
	resource.Rollout
	Scope, Counts, WaveOf string
}

func (s *Server) rolloutRow(words *scopeWords, ro resource.Rollout) rolloutRow {
	return rolloutRow{Rollout: ro, Scope: words.sayRollout(ro.Scope), Counts: sayCounts(ro.Counts),
		WaveOf: fmt.Sprintf("%d/%d", min(ro.Wave+1, len(ro.Waves)), len(ro.Waves))}
}

type rolloutsData struct {
	Rollouts []rolloutRow
	NextURL  string
	FirstURL string
}

// rolloutsPage lists the organization's rollouts, newest first.
func (s *Server) rolloutsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	p := cloud.Page{Limit: rolloutsPageSize, Cursor: r.URL.Query().Get("after")}
	list, err := firstOnBadCursor(&p, func(p cloud.Page) (resource.List[resource.Rollout], error) {
		return s.cfg.Rollouts.ListRollouts(ctx, org, p)
	})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d := rolloutsData{}
	words := s.scopeWords(ctx, org)
	for _, ro := range list.Data {
		d.Rollouts = append(d.Rollouts, s.rolloutRow(words, ro))
	}
	if list.Pagination.HasMore && list.Pagination.NextCursor != nil {
		d.NextURL = "/panel/rollouts?after=" + url.QueryEscape(*list.Pagination.NextCursor)
	}
	if p.Cursor != "" {
		d.FirstURL = "/panel/rollouts"
	}
	s.render(w, r, rq, http.StatusOK, "rollouts", "Rollouts", d)
}

// rolloutForm is the new rollout's form as typed.
type rolloutForm struct {
	Version                    string
	ScopeKind, DeviceIDs, Tags string
	Waves, MaxFailures         string
	HealthFor                  string
}

type rolloutFormData struct {
	Form     rolloutForm
	Versions []option
	Errors   map[string]string
}

// rolloutFormData is the form f with the organization's release versions
// (newest first) to choose from.
func (s *Server) rolloutFormData(r *http.Request, rq *request, f rolloutForm) (*rolloutFormData, error) {
	d := &rolloutFormData{Form: f, Errors: map[string]string{}}
	if s.cfg.Releases == nil {
		return d, nil
	}
	rels, err := s.cfg.Releases.ListReleases(r.Context(), rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(rels, func(a, b cloud.Release) int { return b.CreatedAt.Compare(a.CreatedAt) })
	archs := map[string][]string{}
	var versions []string
	for _, rel := range rels {
		if _, seen := archs[rel.Version]; !seen {
			versions = append(versions, rel.Version)
		}
		archs[rel.Version] = append(archs[rel.Version], rel.Arch)
	}
	for _, v := range versions {
		a := archs[v]
		slices.Sort(a)
		d.Versions = append(d.Versions, option{Value: v, Label: v + " (" + strings.Join(a, ", ") + ")", Selected: v == f.Version})
	}
	return d, nil
}

// newRolloutPage is the form of a new rollout: 1, 10 and 100 % waves, no
// failure allowed, 2 minutes of health by default.
func (s *Server) newRolloutPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.rolloutFormData(r, rq, rolloutForm{ScopeKind: "all", Waves: "1, 10, 100", MaxFailures: "0", HealthFor: "2m"})
	s.show(w, r, rq, "rollout_new", "New rollout", d, err)
}

// createRollout starts a rollout; an error is shown beside the field it
// names, with what was typed, and nothing is stored.
func (s *Server) createRollout(w http.ResponseWriter, r *http.Request, rq *request) {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	f := rolloutForm{Version: v("version"), ScopeKind: v("scope"), DeviceIDs: v("deviceIds"), Tags: v("tags"),
		Waves: v("waves"), MaxFailures: v("maxFailures"), HealthFor: v("healthFor")}
	d, err := s.rolloutFormData(r, rq, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	nr := resource.NewRollout{Version: f.Version, HealthFor: f.HealthFor}
	sc := formScope(f.ScopeKind, f.DeviceIDs, f.Tags, d.Errors)
	nr.Scope = resource.RolloutScope{DeviceIDs: sc.DeviceIDs, Tags: sc.Tags}
	if f.Version == "" {
		d.Errors["version"] = "version: choose the version to roll out"
	}
	for _, p := range splitList(f.Waves) {
		n, err := strconv.Atoi(strings.TrimSuffix(p, "%"))
		if err != nil {
			d.Errors["waves"] = fmt.Sprintf("waves: %q is not a whole percentage (write them like 1, 10, 100)", p)
			break
		}
		nr.Waves = append(nr.Waves, n)
	}
	if f.MaxFailures != "" {
		n, err := strconv.Atoi(f.MaxFailures)
		if err != nil || n < 0 || n > math.MaxInt32 {
			d.Errors["maxFailures"] = "maxFailures: a whole number of devices, 0 or more"
		} else {
			nr.MaxFailures = &n
		}
	}
	if len(d.Errors) == 0 {
		ro, err := s.cfg.Rollouts.CreateRollout(r.Context(), rq.User.OrgID, nr)
		switch cloud.ErrorCode(err) {
		case cloud.EINTERNAL:
			if err != nil {
				s.fail(w, r, rq, err)
				return
			}
			s.log.Info("panel: rollout created", "rollout_id", ro.ID, "version", ro.Version, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
			s.flash(r, fmt.Sprintf("Rollout of %s to %d device%s created; its first wave starts within a second.", ro.Version, ro.Total, plural(ro.Total)))
			http.Redirect(w, r, "/panel/rollouts/"+url.PathEscape(ro.ID), http.StatusSeeOther)
			return
		case cloud.EINVALID, cloud.ECONFLICT, cloud.ENOTFOUND:
			msg := cloud.ErrorMessage(err)
			d.Errors[formField(msg, "version", "waves", "maxFailures", "healthFor")] = msg
		default:
			s.fail(w, r, rq, err)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "rollout_new", "New rollout", d)
}

// formField is the form field an error message names: the scope's parts
// as the scope fields ("scope", "deviceIds", "tags"), else one of known, else
// "" (the form's banner).
func formField(msg string, known ...string) string {
	switch name := errorField(msg); name {
	case "scope.deviceIds":
		return "deviceIds"
	case "scope.tags":
		return "tags"
	case "scope":
		return name
	default:
		if slices.Contains(known, name) {
			return name
		}
	}
	return ""
}

type waveRow struct {
	Number, Percent, Devices int
	Counts                   string
	Current                  bool
}

type rolloutData struct {
	Rollout rolloutRow
	Detail  resource.RolloutDetail
	Waves   []waveRow
	Devices []resource.RolloutDevice
	// Shown is how many devices match the filters; Devices holds at most
	// maxRolloutRows of them.
	Shown       int
	Wave        string // the filters as given
	State       string
	States      []option
	WaveOptions []option
	CanPause    bool
	CanResume   bool
	CanCancel   bool
	Live        bool   // running or paused: the progress refreshes itself
	RefreshURL  string // the page with its filters, which htmx reads every 5 s
	Error       string
}

// rolloutPage shows a rollout: its settings, progress by wave, and by
// device (filtered by ?wave=N, 1-based, and ?state=S), with "Pause",
// "Resume" and "Cancel" as its state allows.
func (s *Server) rolloutPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.rolloutData(r, rq, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.render(w, r, rq, http.StatusOK, "rollout", "Rollout of "+d.Detail.Version, d)
}

func (s *Server) rolloutData(r *http.Request, rq *request, id string) (*rolloutData, error) {
	ctx := r.Context()
	org := rq.User.OrgID
	ro, err := s.cfg.Rollouts.Rollout(ctx, org, id)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	d := &rolloutData{Rollout: s.rolloutRow(s.scopeWords(ctx, org), ro.Rollout), Detail: ro, Wave: q.Get("wave"), State: q.Get("state"),
		RefreshURL: "/panel/rollouts/" + url.PathEscape(ro.ID)}
	if f := (url.Values{"wave": {d.Wave}, "state": {d.State}}); d.Wave != "" || d.State != "" {
		d.RefreshURL += "?" + f.Encode()
	}
	switch ro.State {
	case resource.RolloutRunning:
		d.CanPause, d.CanCancel, d.Live = true, true, true
	case resource.RolloutPaused:
		d.CanResume, d.CanCancel, d.Live = true, true, true
	}
	byWave := make([]map[string]int, len(ro.Waves))
	for i := range byWave {
		byWave[i] = map[string]int{}
	}
	for _, dev := range ro.Devices {
		if dev.Wave >= 0 && dev.Wave < len(byWave) {
			byWave[dev.Wave][dev.State]++
		}
	}
	d.WaveOptions = []option{{Value: "", Label: "any", Selected: d.Wave == ""}}
	for i, pct := range ro.Waves {
		n := 0
		for _, c := range byWave[i] {
			n += c
		}
		d.Waves = append(d.Waves, waveRow{Number: i + 1, Percent: pct, Devices: n, Counts: sayCounts(byWave[i]), Current: i == ro.Wave})
		d.WaveOptions = append(d.WaveOptions, option{Value: strconv.Itoa(i + 1), Label: strconv.Itoa(i + 1), Selected: d.Wave == strconv.Itoa(i+1)})
	}
	d.States = []option{{Value: "", Label: "any", Selected: d.State == ""}}
	for _, st := range deviceStates {
		d.States = append(d.States, option{Value: st, Label: sayState(st), Selected: d.State == st})
	}
	wave, _ := strconv.Atoi(d.Wave)
	for _, dev := range ro.Devices {
		if (wave > 0 && dev.Wave != wave-1) || (d.State != "" && dev.State != d.State) {
			continue
		}
		d.Shown++
		if len(d.Devices) < maxRolloutRows {
			d.Devices = append(d.Devices, dev)
		}
	}
	return d, nil
}

// actRollout pauses, resumes or cancels a rollout (the last element of the
// path); cancel asks for confirmation first. A state that does not allow it
// is shown on the rollout's page (409) and nothing changes.
func (s *Server) actRollout(w http.ResponseWriter, r *http.Request, rq *request) {
	id := r.PathValue("id")
	action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	back := "/panel/rollouts/" + url.PathEscape(id)
	if action == "cancel" {
		ro, err := s.cfg.Rollouts.Rollout(r.Context(), rq.User.OrgID, id)
		if err != nil {
			s.fail(w, r, rq, err)
			return
		}
		pending := ro.Counts[resource.RolloutDevicePending]
		if s.askFirst(w, r, rq, "Cancel rollout", confirmData{
			Heading: "Cancel the rollout of " + ro.Version + "?",
			Message: fmt.Sprintf("Its %d pending device%s are skipped; devices updating now finish their update. This cannot be undone.", pending, plural(pending)),
			Action:  back + "/cancel", Button: "Cancel rollout", Cancel: back,
		}) {
			return
		}
	}
	ro, err := s.cfg.Rollouts.ActRollout(r.Context(), rq.User.OrgID, id, action)
	if cloud.ErrorCode(err) == cloud.ECONFLICT {
		d, derr := s.rolloutData(r, rq, id)
		if derr != nil {
			s.fail(w, r, rq, derr)
			return
		}
		d.Error = cloud.ErrorMessage(err)
		s.render(w, r, rq, http.StatusConflict, "rollout", "Rollout of "+d.Detail.Version, d)
		return
	}
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: rollout "+action, "rollout_id", id, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	msg := map[string]string{
		"pause":  "Rollout paused: no new wave starts; devices updating now finish.",
		"resume": "Rollout resumed.",
		"cancel": "Rollout canceled: its pending devices are skipped.",
	}[action]
	s.flash(r, msg+" State: "+sayState(ro.State)+".")
	http.Redirect(w, r, back, http.StatusSeeOther)
}
