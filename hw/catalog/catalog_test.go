package catalog_test

import (
	"strings"
	"testing"

	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

func TestIG500Layout(t *testing.T) {
	m := catalog.MustLookup("IG-500")
	if !m.Has(resource.CapabilitySerialIO) {
		t.Fatal("IG-500 lacks serial.io")
	}
	var ids []string
	for _, c := range m.Channels {
		ids = append(ids, c.ID)
	}
	if got := strings.Join(ids, ","); got != "uart-1,rs485-1,rs485-2,canfd-1,gpio-1,gpio-2,gpio-3,gpio-4" {
		t.Fatalf("channels = %s", got)
	}
}

func TestIG100HasNoSerialIO(t *testing.T) {
	m := catalog.MustLookup("IG-100")
	if m.Has(resource.CapabilitySerialIO) || len(m.Channels) != 0 {
		t.Fatalf("IG-100 = %+v", m)
	}
}

func TestEveryChannelIsWellFormed(t *testing.T) {
	for _, name := range catalog.Names() {
		m := catalog.MustLookup(name)
		seen := map[string]bool{}
		for _, c := range m.Channels {
			if seen[c.ID] {
				t.Errorf("%s: duplicate channel %s", name, c.ID)
			}
			seen[c.ID] = true
			if !strings.HasPrefix(c.ID, c.Group+"-") {
				t.Errorf("%s: channel %s not named after group %s", name, c.ID, c.Group)
			}
			if c.Label == "" || len(c.Terminals) == 0 || c.Device == "" {
				t.Errorf("%s/%s: missing label, terminals or device", name, c.ID)
			}
			cfg := c.DefaultConfig()
			if cfg.Kind != c.Group {
				t.Errorf("%s/%s: default kind %q", name, c.ID, cfg.Kind)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s/%s: default config invalid: %v", name, c.ID, err)
			}
			// A fresh copy each call: changing one must not change the catalog.
			if c.Group == serialcfg.KindRS485 {
				cfg.RS485.SlaveID = 99
				if c.DefaultConfig().RS485.SlaveID == 99 {
					t.Errorf("%s/%s: DefaultConfig shares state", name, c.ID)
				}
			}
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	if _, ok := catalog.Lookup("IG-999"); ok {
		t.Fatal("unknown model found")
	}
}
