package canfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/fleet/fleet/shared/serialcfg"
)

// Wire sizes and flags of the Linux SocketCAN frame structures
// (linux/can.h, linux/can/error.h). They are spelled out here because
// golang.org/x/sys/unix does not export all of them, and because the
// in-process bus and the tests use the same encoding.
const (
	// ClassicMTU is sizeof(struct can_frame).
	ClassicMTU = 16
	// FDMTU is sizeof(struct canfd_frame).
	FDMTU = 72
	// MaxFDData is the largest CAN-FD payload.
	MaxFDData = 64

	flagEFF = 0x80000000 // CAN_EFF_FLAG: extended (29-bit) identifier
	flagRTR = 0x40000000 // CAN_RTR_FLAG: remote transmission request
	flagERR = 0x20000000 // CAN_ERR_FLAG: error message frame
	maskEFF = 0x1FFFFFFF // CAN_EFF_MASK
	maskSFF = 0x000007FF // CAN_SFF_MASK

	fdBRS = 0x01 // CANFD_BRS: bit rate switch (second bitrate for payload)
	fdESI = 0x02 // CANFD_ESI: error state indicator of the transmitting node
	fdFDF = 0x04 // CANFD_FDF: the frame is a CAN-FD frame
)

// Error classes carried in the identifier of an error frame
// (CAN_ERR_* in linux/can/error.h).
const (
	ErrClassTxTimeout  = 0x001
	ErrClassLostArb    = 0x002
	ErrClassController = 0x004
	ErrClassProtocol   = 0x008
	ErrClassTransceive = 0x010
	ErrClassNoAck      = 0x020
	ErrClassBusOff     = 0x040
	ErrClassBusError   = 0x080
	ErrClassRestarted  = 0x100
	ErrClassCounters   = 0x200

	// ErrClassAll is the error mask the driver subscribes to with
	// CAN_RAW_ERR_FILTER.
	ErrClassAll = 0x1FFFFFFF
)

// Controller status bits of data[1] of an ErrClassController frame.
const (
	CtrlRxOverflow = 0x01
	CtrlTxOverflow = 0x02
	CtrlRxWarning  = 0x04
	CtrlTxWarning  = 0x08
	CtrlRxPassive  = 0x10
	CtrlTxPassive  = 0x20
	CtrlActive     = 0x40
)

// Frame is one CAN or CAN-FD frame, or an error frame reported by the
// controller.
type Frame struct {
	// ID is the identifier: 11 bits, or 29 bits when Extended. For an error
	// frame it holds the error class bits (ErrClass...).
	ID       uint32
	Extended bool
	// FD marks a CAN-FD frame; a frame without FD is a classic frame of at
	// most 8 bytes.
	FD bool
	// BRS (bit rate switch) sends the payload at the data bitrate; FD only.
	BRS bool
	// ESI (error state indicator) is set by a transmitter in error-passive
	// state; FD only, read on reception.
	ESI bool
	// RTR marks a classic remote request.
	RTR bool
	// Err marks an error frame: ID holds the classes, Data the details.
	Err  bool
	Data []byte
}

// String formats f the way live telemetry shows a frame: the identifier
// (three hex digits, or eight when extended), '#', and the payload as
// uppercase hex digits without separators ("123#DEADBEEF", "1ABCDEF0#",
// as candump's compact form). Error frames read "ERR#<classes>".
func (f Frame) String() string {
	if f.Err {
		return fmt.Sprintf("ERR#%08X", f.ID)
	}
	return serialcfg.FormatCANID(f.ID, f.Extended) + "#" + strings.ToUpper(fmt.Sprintf("%X", f.Data))
}

// Marshal encodes f as a SocketCAN frame: a 72-byte canfd_frame when f.FD,
// else a 16-byte can_frame.
func (f Frame) Marshal() ([]byte, error) {
	id := f.ID
	switch {
	case f.Err:
		id = id&maskEFF | flagERR
	case f.Extended:
		if id > maskEFF {
			return nil, fmt.Errorf("extended id %#x above 0x1FFFFFFF", id)
		}
		id |= flagEFF
	default:
		if id > maskSFF {
			return nil, fmt.Errorf("standard id %#x above 0x7FF", id)
		}
	}
	if f.FD {
		if !serialcfg.ValidCANFDLength(len(f.Data)) {
			return nil, fmt.Errorf("%d bytes is not a CAN-FD length", len(f.Data))
		}
		b := make([]byte, FDMTU)
		binary.NativeEndian.PutUint32(b[0:4], id)
		b[4] = byte(len(f.Data))
		flags := byte(fdFDF)
		if f.BRS {
			flags |= fdBRS
		}
		if f.ESI {
			flags |= fdESI
		}
		b[5] = flags
		copy(b[8:], f.Data)
		return b, nil
	}
	if len(f.Data) > 8 {
		return nil, fmt.Errorf("%d bytes in a classic frame (at most 8; set FD)", len(f.Data))
	}
	if f.RTR {
		id |= flagRTR
	}
	b := make([]byte, ClassicMTU)
	binary.NativeEndian.PutUint32(b[0:4], id)
	b[4] = byte(len(f.Data))
	copy(b[8:], f.Data)
	return b, nil
}

// ErrShortFrame is returned by Unmarshal for a buffer of neither size.
var ErrShortFrame = errors.New("not a CAN frame: size is neither 16 nor 72 bytes")

// Unmarshal decodes a 16-byte can_frame or a 72-byte canfd_frame.
func Unmarshal(b []byte) (Frame, error) {
	if len(b) != ClassicMTU && len(b) != FDMTU {
		return Frame{}, fmt.Errorf("%w (%d)", ErrShortFrame, len(b))
	}
	raw := binary.NativeEndian.Uint32(b[0:4])
	n := int(b[4])
	var f Frame
	if len(b) == FDMTU {
		if n > MaxFDData {
			return Frame{}, fmt.Errorf("canfd_frame length %d above 64", n)
		}
		f.FD = true
		f.BRS = b[5]&fdBRS != 0
		f.ESI = b[5]&fdESI != 0
	} else if n > 8 {
		return Frame{}, fmt.Errorf("can_frame length %d above 8", n)
	}
	f.Data = append([]byte(nil), b[8:8+n]...)
	switch {
	case raw&flagERR != 0:
		f.Err = true
		f.ID = raw & maskEFF
	case raw&flagEFF != 0:
		f.Extended = true
		f.ID = raw & maskEFF
	default:
		f.ID = raw & maskSFF
		f.RTR = !f.FD && raw&flagRTR != 0 // CAN-FD has no remote frames
	}
	return f, nil
}

// ErrorText turns an error frame into the short cause shown in
// telemetry.error ("bus-off", "error-passive", ...). It returns "" for a
// frame that reports recovery (restarted, back to error-active) or only
// informational classes (lost arbitration), and ok=false for a frame that
// is not an error frame.
func ErrorText(f Frame) (text string, ok bool) {
	if !f.Err {
		return "", false
	}
	c := f.ID
	var ctrl byte
	if len(f.Data) > 1 {
		ctrl = f.Data[1]
	}
	switch {
	case c&ErrClassBusOff != 0:
		return "bus-off", true
	case c&ErrClassRestarted != 0:
		return "", true
	case c&ErrClassController != 0 && ctrl&(CtrlRxPassive|CtrlTxPassive) != 0:
		return "error-passive", true
	case c&ErrClassNoAck != 0:
		return "no ack (no other node on the bus?)", true
	case c&ErrClassController != 0 && ctrl&(CtrlRxWarning|CtrlTxWarning) != 0:
		return "error-warning", true
	case c&ErrClassController != 0 && ctrl&(CtrlRxOverflow|CtrlTxOverflow) != 0:
		return "controller overflow", true
	case c&ErrClassController != 0 && ctrl&CtrlActive != 0:
		return "", true
	case c&(ErrClassProtocol|ErrClassBusError) != 0:
		return "bus error (protocol violation)", true
	case c&ErrClassTransceive != 0:
		return "transceiver error", true
	case c&ErrClassTxTimeout != 0:
		return "tx timeout", true
	}
	return "", true
}
