package panel

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/dbcimport"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The DBC import form of a canfd channel (DESIGN.md "Points"): a .dbc
// file's signals become the channel's points through cloud/dbcimport, the
// code `fleet-relay channel import-dbc` runs, and the channel is saved as
// the "Save" button saves it. A malformed file is shown with the line its
// parser names, and nothing changes.

// MaxDBCBytes bounds an uploaded DBC file.
const MaxDBCBytes = 1 << 20

// dbcRoute is the import form's route.
const dbcRoute = "/panel/devices/{id}/channels/{ch}/dbc"

// maxDBCBody bounds the import form's body: the file and the form around
// it.
const maxDBCBody = MaxDBCBytes + MaxFormBytes

// dbcForm is the import form's state after a refused import.
type dbcForm struct {
	Channel  string // the channel's id
	Action   string // the form's URL
	Messages string
	Error    string
}

// importDBC turns the uploaded DBC file's signals (of the messages named,
// or all) into the canfd channel's points, merged with those it has.
func (s *Server) importDBC(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, f, err := s.channelPage(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	chID := f.Channel.ID
	if f.DBC == nil {
		s.fail(w, r, rq, cloud.Errorf(cloud.EKIND, "%s is not a CAN FD channel; only CAN FD channels import DBC files", chID))
		return
	}
	cfg, skipped, from, err := s.dbcConfig(r, f)
	if err == nil {
		_, err = s.cfg.Serial.ImportPoints(ctx, rq.User.OrgID, d.Device.ID, chID, cfg, from)
	}
	if err != nil {
		switch {
		case tooBig(err):
			s.renderError(w, r, rq, http.StatusRequestEntityTooLarge, fmt.Sprintf("The DBC file was larger than %d KiB and was refused; nothing was changed.", MaxDBCBytes>>10))
			return
		case errors.Is(err, errDBC):
			f.DBC.Error = strings.TrimPrefix(err.Error(), errDBC.Error()+": ")
		case cloud.ErrorCode(err) == cloud.EINTERNAL:
			s.fail(w, r, rq, err)
			return
		default:
			f.DBC.Error = cloud.ErrorMessage(err)
		}
		if !strings.HasSuffix(f.DBC.Error, ".") {
			f.DBC.Error += "."
		}
		f.DBC.Error += " Nothing was changed."
		f.Open = true
		s.render(w, r, rq, http.StatusBadRequest, "device", d.Device.Name, d)
		return
	}
	msg := fmt.Sprintf("DBC file imported: %s now has %d point%s; the agent applies them at once if connected.", chID, len(cfg.CANFD.Points), plural(len(cfg.CANFD.Points)))
	if len(skipped) > 0 {
		msg += " Skipped: " + strings.Join(skipped, "; ")
	}
	s.flash(r, msg)
	http.Redirect(w, r, "/panel/devices/"+url.PathEscape(d.Device.ID)+"#config-"+chID, http.StatusSeeOther)
}

// errDBC marks what is wrong with the upload itself, shown in the form.
var errDBC = errors.New("DBC import")

// dbcConfig reads the upload and returns the channel's configuration with
// the file's points merged in, what was skipped, and the import (the
// file's name, how many points it gave).
func (s *Server) dbcConfig(r *http.Request, f *channelForm) (serialcfg.Config, []string, cloud.PointsImport, error) {
	if err := r.ParseMultipartForm(maxDBCBody); err != nil {
		if tooBig(err) {
			return serialcfg.Config{}, nil, cloud.PointsImport{}, err
		}
		return serialcfg.Config{}, nil, cloud.PointsImport{}, fmt.Errorf("%w: choose a .dbc file to upload (the form was not a file upload: %v)", errDBC, err)
	}
	defer r.MultipartForm.RemoveAll()
	f.DBC.Messages = strings.TrimSpace(r.PostFormValue("messages"))
	file, hdr, err := r.FormFile("dbc")
	if err != nil {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, fmt.Errorf("%w: choose a .dbc file to upload", errDBC)
	}
	defer file.Close()
	if hdr.Size > MaxDBCBytes {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, &http.MaxBytesError{Limit: MaxDBCBytes}
	}
	src, err := io.ReadAll(io.LimitReader(file, MaxDBCBytes+1))
	if err != nil {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, fmt.Errorf("%w: the file could not be read: %v", errDBC, err)
	}
	if len(src) > MaxDBCBytes {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, &http.MaxBytesError{Limit: MaxDBCBytes}
	}
	messages := strings.FieldsFunc(f.DBC.Messages, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	name := path.Base(hdr.Filename)
	res, err := dbcimport.Import(name, src, messages)
	if err != nil {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, fmt.Errorf("%w: %w", errDBC, err)
	}
	merged, err := dbcimport.Merge(*f.Channel.Config.CANFD, res.Points)
	if err != nil {
		return serialcfg.Config{}, nil, cloud.PointsImport{}, fmt.Errorf("%w: %w", errDBC, err)
	}
	return serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &merged}, res.Skipped, cloud.PointsImport{File: name, Points: len(res.Points)}, nil
}
