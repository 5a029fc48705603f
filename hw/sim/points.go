package sim

import (
	"hash/fnv"
	"math"
	"time"

	"go.einride.tech/can"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Points: every configured point reads a real-looking value, so a demo
// shows named values and charts without hardware.
//
//   - rs485, float types (f32, f64): a slow sine, 21.5 ± 1.5 over a period
//     of 5 to 7 minutes, its phase and period fixed by the point's name
//     (a room temperature); integer types
//     count up once a second from where the point's name puts them; bool
//     toggles every 10 to 19 seconds. Then value = raw × scale + offset.
//   - canfd: the simulated peer also sends the frames of deploy/demo/demo.dbc
//     every 100 ms, encoded with einride's can.Data: EngineData 0x100
//     (EngineSpeed, Intel 16 bit × 0.25 rpm, 800..3000; CoolantTemp,
//     Motorola signed 8 bit − 40 °C, 72..84) and VehicleData 0x18FEF100
//     (VehicleSpeed, Intel 16 bit / 256 km/h, 20..80). Points are decoded
//     from them as the real port decodes frames (canfd.Signal): a point of
//     another id is never received (zero At), one too long for its frame
//     reads the port's "too short" error.
//   - gpio input: the level live shows (toggling every second).

// Demo frame ids (deploy/demo/demo.dbc).
const (
	EngineDataID  = 0x100
	VehicleDataID = 0x18FEF100
)

// framePeriod is how often the simulated CAN peer sends the demo frames.
const framePeriod = 100 * time.Millisecond

// DemoFrames returns the frames of deploy/demo/demo.dbc the simulated CAN
// peer sends at t, with values that move smoothly.
func DemoFrames(t time.Time) []canfd.Frame {
	s := float64(t.UnixNano()) / 1e9
	rpm := 1900 + 1100*math.Sin(2*math.Pi*s/60)
	coolant := 78 + 6*math.Sin(2*math.Pi*s/300)
	speed := 50 + 30*math.Sin(2*math.Pi*s/120)
	var engine, vehicle can.Data
	engine.SetUnsignedBitsLittleEndian(0, 16, uint64(math.Round(rpm/0.25)))
	engine.SetSignedBitsBigEndian(23, 8, int64(math.Round(coolant+40)))
	vehicle.SetUnsignedBitsLittleEndian(8, 16, uint64(math.Round(speed*256)))
	return []canfd.Frame{
		{ID: EngineDataID, Data: engine[:]},
		{ID: VehicleDataID, Extended: true, Data: vehicle[:]},
	}
}

// seed is a number the point's name fixes.
func seed(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// ReadPoints implements hw.PointReader.
func (p *port) ReadPoints() []hw.PointReading {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	now := p.now()
	c := p.cfg
	switch {
	case c.RS485 != nil:
		out := make([]hw.PointReading, 0, len(c.RS485.Points))
		for _, pt := range c.RS485.Points {
			out = append(out, hw.PointReading{Name: pt.Name, Value: rs485Value(pt, now, p.applied), At: now})
		}
		return out
	case c.CANFD != nil:
		return canPoints(c.CANFD.Points, now)
	case c.GPIO != nil && c.GPIO.Direction == "in":
		return []hw.PointReading{{Name: serialcfg.GPIOLevelPoint, Value: float64(now.Unix() % 2), At: now}}
	}
	return nil
}

// rs485Value is the simulated value of an rs485 point at now, for a
// configuration applied at applied.
func rs485Value(pt serialcfg.RS485Point, now, applied time.Time) float64 {
	h := seed(pt.Name)
	s := float64(now.UnixNano()) / 1e9
	var raw float64
	switch pt.Type {
	case "f32", "f64":
		period := 300 + float64(h%120)
		raw = 21.5 + 1.5*math.Sin(2*math.Pi*s/period+float64(h%628)/100)
		if pt.Type == "f32" {
			raw = float64(float32(raw))
		}
	case "bool":
		raw = float64((now.Unix()/int64(10+h%10) + int64(h)) % 2)
		return raw // no scaling of a bool
	default:
		n := int64(now.Sub(applied)/time.Second) + int64(h%1000)
		switch pt.Type {
		case "u16":
			n %= 1 << 16
		case "i16":
			n %= 1 << 15
		}
		raw = float64(n)
	}
	scale := pt.Scale
	if scale == 0 {
		scale = 1
	}
	return raw*scale + pt.Offset
}

// canPoints decodes points from the demo frames the peer sent last before
// now.
func canPoints(pts []serialcfg.CANPoint, now time.Time) []hw.PointReading {
	at := now.Truncate(framePeriod)
	frames := DemoFrames(at)
	out := make([]hw.PointReading, 0, len(pts))
	for _, pt := range pts {
		r := hw.PointReading{Name: pt.Name}
		s, err := canfd.CompileSignal(pt)
		if err == nil {
			for _, f := range frames {
				if !s.Matches(f) {
					continue
				}
				v, ok := s.Decode(f.Data)
				r.Value, r.At = v, at
				if !ok {
					r.Err = s.TooShort(len(f.Data))
				}
			}
		}
		out = append(out, r)
	}
	return out
}
