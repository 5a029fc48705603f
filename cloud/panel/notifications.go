package panel

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Settings → Notifications: the organization's notification channels
// (e-mail, slack, webhook) that rules send their alerts to.

// channelKinds are the choices of "Kind".
var channelKinds = []option{
	{Value: resource.ChannelEmail, Label: "email: addresses, separated by commas"},
	{Value: resource.ChannelSlack, Label: "slack: an incoming webhook (Slack, Mattermost, Rocket.Chat)"},
	{Value: resource.ChannelWebhook, Label: "webhook: the signed alert webhook body"},
}

type channelRow struct {
	resource.NotificationChannel
	Shown string // the target as this user may see it
}

type notifyForm struct {
	Name, Kind, Target, MinSeverity string
	AllRules                        bool
}

type notificationsData struct {
	Channels   []channelRow
	Form       notifyForm
	Kinds      []option
	Severities []resource.Severity
	Errors     map[string]string
	CanEdit    bool
	CanLog     bool // the user may read the delivery log (Settings → Webhooks)
}

func (s *Server) notificationsData(r *http.Request, rq *request, f notifyForm) (*notificationsData, error) {
	chans, err := s.cfg.Rules.ListChannels(r.Context(), rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	d := &notificationsData{Form: f, Severities: resource.Severities, Errors: map[string]string{},
		CanEdit: rq.User.Role.Can(cloud.PermRules), CanLog: s.cfg.Webhooks != nil && rq.User.Role.Can(cloud.PermWebhooks)}
	for _, k := range channelKinds {
		d.Kinds = append(d.Kinds, option{Value: k.Value, Label: k.Label, Selected: k.Value == f.Kind})
	}
	for _, c := range chans {
		row := channelRow{NotificationChannel: c, Shown: c.Target}
		if !d.CanEdit && c.Kind != resource.ChannelEmail {
			row.Shown = maskURL(c.Target)
		}
		d.Channels = append(d.Channels, row)
	}
	return d, nil
}

// maskURL keeps a URL's scheme and host: a chat webhook's path is its
// secret, shown only to those who edit channels.
func maskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(hidden)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// notificationsPage lists the channels and, for roles that may, the form
// to add one.
func (s *Server) notificationsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.notificationsData(r, rq, notifyForm{Kind: resource.ChannelEmail, MinSeverity: string(resource.SeverityWarning)})
	s.show(w, r, rq, "notifications", "Notifications", d, err)
}

// addChannel creates a channel; a field's error is shown beside it and
// nothing is saved.
func (s *Server) addChannel(w http.ResponseWriter, r *http.Request, rq *request) {
	f := notifyForm{Name: strings.TrimSpace(r.PostFormValue("name")), Kind: r.PostFormValue("kind"), Target: strings.TrimSpace(r.PostFormValue("target")),
		MinSeverity: r.PostFormValue("minSeverity"), AllRules: r.PostFormValue("allRules") != ""}
	d, err := s.notificationsData(r, rq, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	c, err := s.cfg.Rules.CreateChannel(r.Context(), cloud.NewChannel{OrgID: rq.User.OrgID, Name: f.Name, Kind: f.Kind, Target: f.Target,
		MinSeverity: resource.Severity(f.MinSeverity), AllRules: f.AllRules})
	switch cloud.ErrorCode(err) {
	case cloud.EINTERNAL:
		if err != nil {
			s.fail(w, r, rq, err)
			return
		}
		s.log.Info("panel: notification channel added", "channel_id", c.ID, "kind", c.Kind, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
		msg := "Channel “" + c.Name + "” added."
		if f.AllRules {
			msg += " Every rule now sends its alerts to it."
		} else {
			msg += " Choose it under Notify in the rules that should send to it."
		}
		s.flash(r, msg)
		http.Redirect(w, r, "/panel/settings/notifications", http.StatusSeeOther)
		return
	case cloud.EINVALID, cloud.ECONFLICT:
		msg := cloud.ErrorMessage(err)
		key := errorField(msg)
		switch key {
		case "name", "kind", "target", "minSeverity":
		default:
			key = ""
		}
		d.Errors[key] = msg
	default:
		s.fail(w, r, rq, err)
		return
	}
	s.render(w, r, rq, http.StatusBadRequest, "notifications", "Notifications", d)
}

// orgChannel returns the organization's channel id (ENOTFOUND otherwise).
func (s *Server) orgChannel(r *http.Request, rq *request) (resource.NotificationChannel, error) {
	chans, err := s.cfg.Rules.ListChannels(r.Context(), rq.User.OrgID)
	if err != nil {
		return resource.NotificationChannel{}, err
	}
	id := r.PathValue("id")
	for _, c := range chans {
		if c.ID == id {
			return c, nil
		}
	}
	return resource.NotificationChannel{}, cloud.Errorf(cloud.ENOTFOUND, "notification channel %q not found", id)
}

// testChannel queues a test message to a channel through the outbox.
func (s *Server) testChannel(w http.ResponseWriter, r *http.Request, rq *request) {
	c, err := s.orgChannel(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	id, err := s.cfg.Rules.TestChannel(r.Context(), rq.User.OrgID, c.ID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: notification test queued", "channel_id", c.ID, "delivery_id", id, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Test message to “"+c.Name+"” queued as delivery "+id+"; it shows in the delivery log of Settings → Webhooks.")
	http.Redirect(w, r, "/panel/settings/notifications", http.StatusSeeOther)
}

// removeChannel asks for confirmation, then (confirm=yes) deletes the
// channel; rules stop sending to it.
func (s *Server) removeChannel(w http.ResponseWriter, r *http.Request, rq *request) {
	c, err := s.orgChannel(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if s.askFirst(w, r, rq, "Remove notification channel", confirmData{
		Heading: "Remove the channel “" + c.Name + "”?",
		Message: "Every rule stops sending alerts to it.",
		Action:  "/panel/settings/notifications/" + url.PathEscape(c.ID) + "/remove", Button: "Remove channel",
		Cancel: "/panel/settings/notifications",
	}) {
		return
	}
	if err := s.cfg.Rules.DeleteChannel(r.Context(), rq.User.OrgID, c.ID); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: notification channel removed", "channel_id", c.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Channel “"+c.Name+"” removed.")
	http.Redirect(w, r, "/panel/settings/notifications", http.StatusSeeOther)
}
