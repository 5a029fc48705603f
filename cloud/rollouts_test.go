package cloud_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

func TestCheckNewRolloutNamesTheField(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"version":""}`, "version"},
		{`{"version":"1.0 beta"}`, "version"},
		{`{"version":"` + strings.Repeat("1", 65) + `"}`, "version"},
		{`{"version":"2.0.0","scope":{"deviceIds":["a"],"tags":["b"]}}`, "scope"},
		{`{"version":"2.0.0","scope":{"deviceIds":["a",""]}}`, "scope.deviceIds[1]"},
		{`{"version":"2.0.0","scope":{"tags":["ok","Bad"]}}`, "scope.tags[1]"},
		{`{"version":"2.0.0","waves":[10,10,100]}`, "waves[1]"},
		{`{"version":"2.0.0","waves":[50,20,100]}`, "waves[1]"},
		{`{"version":"2.0.0","waves":[0,100]}`, "waves[0]"},
		{`{"version":"2.0.0","waves":[10,101]}`, "waves[1]"},
		{`{"version":"2.0.0","waves":[10,50]}`, "waves"},
		{`{"version":"2.0.0","waves":[1,2,3,4,5,6,7,8,9,10,100]}`, "waves"},
		{`{"version":"2.0.0","maxFailures":-1}`, "maxFailures"},
		{`{"version":"2.0.0","healthFor":"2 minutes"}`, "healthFor"},
		{`{"version":"2.0.0","healthFor":"9s"}`, "healthFor"},
		{`{"version":"2.0.0","healthFor":"61m"}`, "healthFor"},
	} {
		var nr resource.NewRollout
		if err := json.Unmarshal([]byte(c.body), &nr); err != nil {
			t.Fatal(err)
		}
		_, err := cloud.CheckNewRollout(nr)
		if cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), c.field+":") {
			t.Errorf("%s: %v, want EINVALID naming %s", c.body, err, c.field)
		}
	}
}

func TestCheckNewRolloutDefaults(t *testing.T) {
	c, err := cloud.CheckNewRollout(resource.NewRollout{Version: " 2.0.0 ", Scope: resource.RolloutScope{Tags: []string{"b", "a", "b"}}})
	if err != nil || c.Version != "2.0.0" || !slices.Equal(c.Waves, []int{100}) || c.MaxFailures != 0 || c.HealthFor != 2*time.Minute ||
		!slices.Equal(c.Scope.Tags, []string{"a", "b"}) {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	three := 3
	c, err = cloud.CheckNewRollout(resource.NewRollout{Version: "2.0.0", Waves: []int{1, 10, 100}, MaxFailures: &three, HealthFor: "1h",
		Scope: resource.RolloutScope{DeviceIDs: []string{"b", "a", "b"}}})
	if err != nil || !slices.Equal(c.Waves, []int{1, 10, 100}) || c.MaxFailures != 3 || c.HealthFor != time.Hour || !slices.Equal(c.Scope.DeviceIDs, []string{"b", "a"}) {
		t.Errorf("given: %+v, %v", c, err)
	}
}

func TestRolloutWaveOf(t *testing.T) {
	for _, c := range []struct {
		waves []int
		n     int
		want  []int
	}{
		{[]int{100}, 3, []int{0, 0, 0}},
		{[]int{1, 50, 100}, 4, []int{0, 1, 2, 2}},
		{[]int{1, 10, 100}, 10, []int{0, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{[]int{1, 10, 100}, 200, append(append(slices.Repeat([]int{0}, 2), slices.Repeat([]int{1}, 18)...), slices.Repeat([]int{2}, 180)...)},
		{[]int{50, 100}, 1, []int{0}},
		{[]int{33, 66, 100}, 3, []int{0, 1, 2}},
	} {
		if got := cloud.RolloutWaveOf(c.waves, c.n); !slices.Equal(got, c.want) {
			t.Errorf("RolloutWaveOf(%v, %d) = %v, want %v", c.waves, c.n, got, c.want)
		}
	}
}
