package modbus

import (
	"errors"
	"fmt"

	gridx "github.com/grid-x/modbus"

	"github.com/fleet/fleet/hw/serialport"
)

// ErrCRC is returned when a reply's CRC does not match its bytes.
var ErrCRC = errors.New("crc error")

// ErrPortClosed is returned while the port is closed or gone.
var ErrPortClosed = serialport.ErrClosed

// TimeoutError is returned when a slave does not answer in time.
type TimeoutError struct{ Slave int }

// Error returns "modbus timeout (slave N)".
func (e *TimeoutError) Error() string { return fmt.Sprintf("modbus timeout (slave %d)", e.Slave) }

// ExceptionError is an exception reply (function code with the high bit
// set) from a slave.
type ExceptionError struct {
	Slave    int
	Function byte
	Code     byte
}

// Error returns the exception's name, such as "illegal data address".
func (e *ExceptionError) Error() string { return ExceptionName(e.Code) }

// ExceptionName names a Modbus exception code as the specification does.
func ExceptionName(code byte) string {
	switch code {
	case 1:
		return "illegal function"
	case 2:
		return "illegal data address"
	case 3:
		return "illegal data value"
	case 4:
		return "slave device failure"
	case 5:
		return "acknowledge"
	case 6:
		return "slave device busy"
	case 8:
		return "memory parity error"
	case 10:
		return "gateway path unavailable"
	case 11:
		return "gateway target device failed to respond"
	}
	return fmt.Sprintf("exception %d", code)
}

// Cause returns the short readable cause of err for telemetry.error:
// "modbus timeout (slave 7)", "crc error", an exception's name, "port
// closed", or "bad reply (slave N)" for a reply that does not match its
// request.
func Cause(err error, slave int) string {
	if err == nil {
		return ""
	}
	var te *TimeoutError
	var ee *ExceptionError
	var ge *gridx.Error
	switch {
	case errors.As(err, &te):
		return te.Error()
	case errors.As(err, &ee):
		return ee.Error()
	case errors.As(err, &ge):
		return ExceptionName(ge.ExceptionCode)
	case errors.Is(err, ErrCRC):
		return "crc error"
	case errors.Is(err, ErrPortClosed):
		return "port closed"
	}
	return fmt.Sprintf("bad reply (slave %d)", slave)
}

// classify turns grid-x's error for an exception reply into ExceptionError.
func classify(err error, slave int) error {
	var ge *gridx.Error
	if errors.As(err, &ge) {
		return &ExceptionError{Slave: slave, Function: ge.FunctionCode &^ 0x80, Code: ge.ExceptionCode}
	}
	return err
}
