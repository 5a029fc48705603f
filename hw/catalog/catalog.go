// Package catalog is the hardware catalog: the gateway models Fleet knows,
// their capabilities, and the layout of each model's industrial I/O port
// (channels, labels, terminals, which are configurable, the OS device behind
// each, and the default configuration). The relay uses it to answer the
// serial routes; the agent uses it to open its channels.
package catalog

import (
	"fmt"
	"sort"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Channel describes one channel of a model's I/O port.
type Channel struct {
	ID           string
	Group        string
	Label        string
	Terminals    []string
	Configurable bool
	// Device is the OS device behind the channel on the real gateway: a tty
	// path for uart and rs485, a network interface for canfd, and
	// "CHIP:LINE" (for example "gpiochip0:5") for gpio.
	Device string
	// defaults returns a fresh default configuration.
	defaults func() serialcfg.Config
}

// DefaultConfig returns a fresh copy of the channel's default configuration.
func (c Channel) DefaultConfig() serialcfg.Config { return c.defaults() }

// Model is a gateway model.
type Model struct {
	Name         string
	Description  string
	Capabilities []string
	Channels     []Channel
}

// Has reports whether the model has capability cap.
func (m Model) Has(cap string) bool {
	for _, c := range m.Capabilities {
		if c == cap {
			return true
		}
	}
	return false
}

// Channel returns the channel with id.
func (m Model) Channel(id string) (Channel, bool) {
	for _, c := range m.Channels {
		if c.ID == id {
			return c, true
		}
	}
	return Channel{}, false
}

// Default configurations, one per group: serialcfg's (its schema's
// defaults; a gpio line is an input).
func defaultUART() serialcfg.Config  { return serialcfg.Default(serialcfg.KindUART) }
func defaultRS485() serialcfg.Config { return serialcfg.Default(serialcfg.KindRS485) }
func defaultCANFD() serialcfg.Config { return serialcfg.Default(serialcfg.KindCANFD) }
func defaultGPIOIn() serialcfg.Config {
	return serialcfg.Default(serialcfg.KindGPIO)
}

var models = map[string]Model{
	"IG-500": {
		Name:         "IG-500",
		Description:  "Industrial gateway with UART, two RS485, CAN-FD and four GPIO",
		Capabilities: []string{resource.CapabilitySerialIO},
		Channels: []Channel{
			{ID: "uart-1", Group: serialcfg.KindUART, Label: "UART 1 (3.3 V TTL)", Terminals: []string{"TX", "RX", "GND"}, Configurable: true, Device: "/dev/ttyS1", defaults: defaultUART},
			{ID: "rs485-1", Group: serialcfg.KindRS485, Label: "RS485 1", Terminals: []string{"A1", "B1", "GND"}, Configurable: true, Device: "/dev/ttyS2", defaults: defaultRS485},
			{ID: "rs485-2", Group: serialcfg.KindRS485, Label: "RS485 2", Terminals: []string{"A2", "B2", "GND"}, Configurable: true, Device: "/dev/ttyS3", defaults: defaultRS485},
			{ID: "canfd-1", Group: serialcfg.KindCANFD, Label: "CAN-FD 1", Terminals: []string{"CANH", "CANL", "GND"}, Configurable: true, Device: "can0", defaults: defaultCANFD},
			{ID: "gpio-1", Group: serialcfg.KindGPIO, Label: "Digital I/O 1", Terminals: []string{"DIO1", "GND"}, Configurable: true, Device: "gpiochip0:5", defaults: defaultGPIOIn},
			{ID: "gpio-2", Group: serialcfg.KindGPIO, Label: "Digital I/O 2", Terminals: []string{"DIO2", "GND"}, Configurable: true, Device: "gpiochip0:6", defaults: defaultGPIOIn},
			{ID: "gpio-3", Group: serialcfg.KindGPIO, Label: "Digital I/O 3", Terminals: []string{"DIO3", "GND"}, Configurable: true, Device: "gpiochip0:13", defaults: defaultGPIOIn},
			{ID: "gpio-4", Group: serialcfg.KindGPIO, Label: "Digital I/O 4", Terminals: []string{"DIO4", "GND"}, Configurable: true, Device: "gpiochip0:19", defaults: defaultGPIOIn},
		},
	},
	"IG-300": {
		Name:         "IG-300",
		Description:  "Compact gateway with one RS485 and two digital inputs; DI2 is wired to the power-fail detector",
		Capabilities: []string{resource.CapabilitySerialIO},
		Channels: []Channel{
			{ID: "rs485-1", Group: serialcfg.KindRS485, Label: "RS485", Terminals: []string{"A", "B", "GND"}, Configurable: true, Device: "/dev/ttyS1", defaults: defaultRS485},
			{ID: "gpio-1", Group: serialcfg.KindGPIO, Label: "Digital input 1", Terminals: []string{"DI1", "GND"}, Configurable: true, Device: "gpiochip0:5", defaults: defaultGPIOIn},
			{ID: "gpio-2", Group: serialcfg.KindGPIO, Label: "Power-fail input (fixed)", Terminals: []string{"PF"}, Configurable: false, Device: "gpiochip0:6", defaults: defaultGPIOIn},
		},
	},
	"IG-100": {
		Name:         "IG-100",
		Description:  "Monitoring-only gateway: metrics, VPN and events, no industrial I/O port",
		Capabilities: nil,
	},
}

// Lookup returns the model named name.
func Lookup(name string) (Model, bool) {
	if m := Find(name); m != nil {
		return *m, true
	}
	return Model{}, false
}

// Find returns the model named name, shared by every caller and not to be
// changed, or nil: for state kept per connected device, which holds a
// pointer where a Model would copy its 80 bytes.
func Find(name string) *Model { return shared[name] }

// shared are the models, for Find.
var shared = func() map[string]*Model {
	m := make(map[string]*Model, len(models))
	for name, model := range models {
		m[name] = &model
	}
	return m
}()

// MustLookup returns the model named name or panics; for tests and demos.
func MustLookup(name string) Model {
	m, ok := Lookup(name)
	if !ok {
		panic(fmt.Sprintf("catalog: unknown model %q", name))
	}
	return m
}

// Names returns the names of every model, sorted.
func Names() []string {
	out := make([]string, 0, len(models))
	for n := range models {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
