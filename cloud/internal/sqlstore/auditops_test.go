package sqlstore

import (
	"slices"
	"testing"
)

// TestChangedSections: the members of a channel configuration a PUT
// changed, added or removed, with strings holding what a scanner could
// take for structure; text that is no object has every member of the
// other changed.
func TestChangedSections(t *testing.T) {
	old := `{"kind":"rs485","baudRate":9600,"parity":"even","tx":{"enabled":true,"note":"a,b}]\"c"},"points":[{"name":"x,y"}]}`
	for _, c := range []struct {
		old, now string
		want     []string
	}{
		{old, old, []string{}},
		{old, `{"kind":"rs485","baudRate":19200,"parity":"even","tx":{"enabled":true,"note":"a,b}]\"c"},"points":[{"name":"x,y"}]}`, []string{"baudRate"}},
		{old, `{"kind":"rs485","baudRate":9600,"parity":"even","tx":{"enabled":true,"note":"a,b}]\"d"},"points":[{"name":"x,y"}]}`, []string{"tx"}},
		{old, `{"kind":"rs485","baudRate":9600,"parity":"even","tx":{"enabled":true,"note":"a,b}]\"c"}}`, []string{"points"}},
		{`{"kind":"rs485","baudRate":9600}`, `{"kind":"rs485","baudRate":9600,"polls":[]}`, []string{"polls"}},
		{`{}`, `{"kind":"gpio"}`, []string{"kind"}},
		{`not json`, `{"kind":"gpio","pull":"up"}`, []string{"kind", "pull"}},
		{`{"kind":"gpio","pull":"up"`, `{"kind":"gpio","pull":"up"}`, []string{"kind", "pull"}},
	} {
		if got := changedSections(c.old, c.now); !slices.Equal(got, c.want) {
			t.Errorf("changedSections(%s, %s) = %v, want %v", c.old, c.now, got, c.want)
		}
	}
}
