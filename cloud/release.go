package cloud

import (
	"regexp"
	"slices"
	"strings"

	"github.com/jedisct1/go-minisign"

	"github.com/fleet/fleet/shared/protocol"
)

// ReleaseChunkBytes is the size of the chunks a release binary is stored
// in (the last one may be shorter): a reader that reads whole chunks at
// multiples of it reads each stored chunk once.
const ReleaseChunkBytes = 1 << 20

// releaseVersion is what a release's version may be: a letter or digit,
// then up to 63 of letters, digits and . + _ ~ - (semver and Debian
// versions fit; nothing a path or a shell would read otherwise).
var releaseVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_~-]{0,63}$`)

// Check checks what AddRelease is given besides the binary: the version
// (releaseVersion), the arch (one of ReleaseArchs) and the signature,
// which must parse as a minisign signature file (go-minisign) of at most
// protocol.MaxCommandSignature bytes, as the update order carries it.
// Errors are EINVALID naming the field.
func (nr NewRelease) Check() error {
	if !releaseVersion.MatchString(nr.Version) {
		return Errorf(EINVALID, "version: %q is not a version (1 to 64 letters, digits and . + _ ~ -, starting with a letter or digit)", clip(nr.Version))
	}
	if !slices.Contains(ReleaseArchs, nr.Arch) {
		return Errorf(EINVALID, "arch: %q is not one of %s", clip(nr.Arch), strings.Join(ReleaseArchs, ", "))
	}
	if len(nr.Signature) > protocol.MaxCommandSignature {
		return Errorf(EINVALID, "signature: %d bytes, more than the %d a minisign signature file takes", len(nr.Signature), protocol.MaxCommandSignature)
	}
	if _, err := minisign.DecodeSignature(nr.Signature); err != nil {
		return &Error{Code: EINVALID, Message: "signature: not a minisign signature file (the .minisig that minisign -S writes)", Err: err}
	}
	return nil
}
