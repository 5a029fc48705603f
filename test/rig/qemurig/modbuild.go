package qemurig

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SourceModule is a build of kernel modules that Debian's image package
// does not ship, made out of tree (make M=...) from Debian's own kernel
// source against Debian's headers for the exact kernel the rig boots.
type SourceModule struct {
	// Name names the build: its directory and its log lines.
	Name string `json:"name"`
	// Files are copied from the kernel source tree into the build
	// directory.
	Files []SourceFile `json:"files"`
	// Kbuild, when set, is written as the build directory's Kbuild file;
	// otherwise one of Files is the directory's own Makefile.
	Kbuild string `json:"kbuild,omitempty"`
	// MakeVars are added to make's command line: the CONFIG_ options that
	// select these objects, set for this build only.
	MakeVars []string `json:"makeVars,omitempty"`
	// Modules are the modules the build makes, by module name.
	Modules []string `json:"modules"`
}

// SourceFile is one file of a SourceModule.
type SourceFile struct {
	// Path is the file's path in the kernel source tree.
	Path string `json:"path"`
	// Replace are edits made to the file, each {old, new}; old must occur
	// exactly once, so a source that changed under an edit fails the build.
	Replace [][2]string `json:"replace,omitempty"`
	// Append is added at the end of the file.
	Append string `json:"append,omitempty"`
}

// DefaultSourceModules are the modules the kernel tests need that Debian's
// kernel does not build: the GPIO simulator (gpio-sim, with the interrupt
// simulator it selects) and the driver of qemu's CTU CAN FD PCI card
// (ctucanfd, ctucanfd_pci). configfs and can_dev, which they use, come from
// the image package.
var DefaultSourceModules = []SourceModule{
	{
		Name: "gpio-sim",
		Files: []SourceFile{
			{Path: "drivers/gpio/gpio-sim.c"},
			{Path: "drivers/gpio/gpiolib.h"},
			// GPIO_SIM selects IRQ_SIM, a bool option Debian's kernel
			// leaves out, so its code is built here as a module of its own.
			{
				Path: "kernel/irq/irq_sim.c",
				// irq_to_desc is not exported to modules; generic_handle_irq
				// runs the same descriptor's handler (handle_simple_irq, set
				// when the interrupt is mapped).
				Replace: [][2]string{{"handle_simple_irq(irq_to_desc(irqnum));", "generic_handle_irq(irqnum);"}},
				Append:  "\n#include <linux/module.h>\nMODULE_LICENSE(\"GPL\");\nMODULE_DESCRIPTION(\"Interrupt simulator (kernel/irq/irq_sim.c as a module)\");\n",
			},
		},
		Kbuild:  "obj-m := irq_sim.o gpio-sim.o\n",
		Modules: []string{"irq_sim", "gpio_sim"},
	},
	{
		Name: "ctucanfd",
		Files: []SourceFile{
			{Path: "drivers/net/can/ctucanfd/Makefile"},
			{Path: "drivers/net/can/ctucanfd/ctucanfd.h"},
			{Path: "drivers/net/can/ctucanfd/ctucanfd_base.c"},
			{Path: "drivers/net/can/ctucanfd/ctucanfd_kframe.h"},
			{Path: "drivers/net/can/ctucanfd/ctucanfd_kregs.h"},
			{Path: "drivers/net/can/ctucanfd/ctucanfd_pci.c"},
		},
		MakeVars: []string{"CONFIG_CAN_CTUCANFD=m", "CONFIG_CAN_CTUCANFD_PCI=m"},
		Modules:  []string{"ctucanfd", "ctucanfd_pci"},
	},
}

// SourceBuild configures BuildSourceModules.
type SourceBuild struct {
	// CacheDir holds one directory per kernel package version.
	CacheDir string
	// ImagePackage and Version name the kernel (linux-image-6.1.0-56-amd64,
	// 6.1.192-2); the headers and source packages of that version are used.
	ImagePackage, Version string
	// Modules are the builds to make.
	Modules []SourceModule
	// Log receives progress lines.
	Log *slog.Logger
}

// BuiltModule is one module built from source.
type BuiltModule struct {
	Name     string   `json:"name"`
	Vermagic string   `json:"vermagic"`
	Depends  []string `json:"depends"`
}

// BuiltModules are the modules of a SourceBuild, in Dir as <name>.ko.
type BuiltModules struct {
	// Key identifies the builds they were made by; a change to
	// DefaultSourceModules builds again.
	Key     string        `json:"key"`
	Modules []BuiltModule `json:"modules"`
	Dir     string        `json:"-"`
}

// imageDeps are the modules the built ones need that were not built.
func (b *BuiltModules) imageDeps() []string {
	var out []string
	for _, m := range b.Modules {
		for _, d := range m.Depends {
			if !slices.ContainsFunc(b.Modules, func(o BuiltModule) bool { return o.Name == d }) && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// BuildSourceModules returns the modules of b.Modules for the kernel,
// from the cache or built now: it fetches Debian's headers for the kernel
// (linux-headers-<flavour>, its -common and linux-kbuild packages) with
// apt-get download, installs the tools they need when missing (the
// compiler the kernel was built with, make, xz-utils; root only), reads
// the listed files from Debian's linux-source tarball of the same version
// (the installed one when it matches, downloaded otherwise), builds each
// out of tree, strips debug information and checks every module's
// vermagic. Only the .ko files are kept.
func BuildSourceModules(ctx context.Context, b SourceBuild) (*BuiltModules, error) {
	log := b.Log
	key, err := sourceKey(b.Modules)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.CacheDir, b.ImagePackage+"_"+strings.ReplaceAll(b.Version, ":", "%3a"))
	if bm, err := readBuilt(dir, key); err == nil {
		log.Info("modules built from source, from cache", "dir", dir)
		return bm, nil
	}
	t0 := time.Now()
	log.Info("building modules from Debian's kernel source (once per kernel version)", "kernel", b.ImagePackage, "version", b.Version)
	if err := os.MkdirAll(b.CacheDir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(b.CacheDir, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	headers, err := fetchHeaders(ctx, tmp, b.ImagePackage, b.Version, log)
	if err != nil {
		return nil, err
	}
	// The kernel release is the image package's name without its prefix
	// (what Debian's headers Makefile sets KERNELRELEASE to).
	release := strings.TrimPrefix(b.ImagePackage, "linux-image-")
	tarball, err := sourceTarball(ctx, tmp, b.Version, log)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, m := range b.Modules {
		for _, f := range m.Files {
			paths = append(paths, f.Path)
		}
	}
	src, err := readTarXZ(ctx, tarball, paths)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	bm := &BuiltModules{Key: key}
	for _, m := range b.Modules {
		built, err := buildOne(ctx, headers, filepath.Join(tmp, "build", m.Name), m, src, release, out)
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", m.Name, err)
		}
		bm.Modules = append(bm.Modules, built...)
	}
	meta, err := json.MarshalIndent(bm, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "built.json"), meta, 0o644); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Rename(out, dir); err != nil {
		return nil, err
	}
	pruneOthers(b.CacheDir, dir, "linux-image-", log)
	log.Info("modules built from source", "took", time.Since(t0).Round(time.Millisecond), "dir", dir)
	return readBuilt(dir, key)
}

// sourceKey is a digest of the builds' description.
func sourceKey(mods []SourceModule) (string, error) {
	data, err := json.Marshal(mods)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

func readBuilt(dir, key string) (*BuiltModules, error) {
	data, err := os.ReadFile(filepath.Join(dir, "built.json"))
	if err != nil {
		return nil, err
	}
	var bm BuiltModules
	if err := json.Unmarshal(data, &bm); err != nil {
		return nil, fmt.Errorf("module cache %s: %w", dir, err)
	}
	if bm.Key != key {
		return nil, errors.New("module cache was built for other sources")
	}
	bm.Dir = dir
	for _, m := range bm.Modules {
		if _, err := os.Stat(filepath.Join(dir, m.Name+".ko")); err != nil {
			return nil, fmt.Errorf("module cache: %w", err)
		}
	}
	return &bm, nil
}

// buildOne writes one build's files into dir, runs kbuild on them against
// the headers and copies the stripped modules into out.
func buildOne(ctx context.Context, headers, dir string, m SourceModule, src map[string][]byte, release, out string) ([]BuiltModule, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		data, err := editSource(src[f.Path], f)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f.Path)), data, 0o644); err != nil {
			return nil, err
		}
	}
	if m.Kbuild != "" {
		if err := os.WriteFile(filepath.Join(dir, "Kbuild"), []byte(m.Kbuild), 0o644); err != nil {
			return nil, err
		}
	}
	args := append([]string{"-C", headers, "M=" + dir, "-j" + strconv.Itoa(runtime.NumCPU())}, m.MakeVars...)
	args = append(args, "modules")
	if _, err := runOut(ctx, "make", args...); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.ko"))
	if err != nil {
		return nil, err
	}
	byName := make(map[string]string, len(files))
	for _, f := range files {
		byName[ModuleName(f)] = f
	}
	var built []BuiltModule
	for _, name := range m.Modules {
		f, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("make made no module %s (made %v)", name, files)
		}
		if _, err := runOut(ctx, "strip", "--strip-debug", f); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		mi, err := readModInfo(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if !strings.HasPrefix(mi.Vermagic, release+" ") {
			return nil, fmt.Errorf("%s: vermagic %q is not for kernel %s", name, mi.Vermagic, release)
		}
		if err := os.WriteFile(filepath.Join(out, name+".ko"), data, 0o644); err != nil {
			return nil, err
		}
		built = append(built, BuiltModule{Name: name, Vermagic: mi.Vermagic, Depends: mi.Depends})
	}
	return built, nil
}

// editSource applies f's edits to a source file.
func editSource(data []byte, f SourceFile) ([]byte, error) {
	if data == nil {
		return nil, fmt.Errorf("%s: not in the kernel source", f.Path)
	}
	s := string(data)
	for _, r := range f.Replace {
		if n := strings.Count(s, r[0]); n != 1 {
			return nil, fmt.Errorf("%s: %q occurs %d times, want once (the source changed under the rig's edit)", f.Path, r[0], n)
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return []byte(s + f.Append), nil
}

// fetchHeaders downloads Debian's headers for the kernel and the packages
// they depend on that carry the build system (…-common, linux-kbuild-*),
// unpacks them under dir, installs the other dependencies (the compiler)
// when missing, and returns the flavour's headers directory, ready for
// make -C.
func fetchHeaders(ctx context.Context, dir, imagePkg, version string, log *slog.Logger) (string, error) {
	hdrPkg := "linux-headers-" + strings.TrimPrefix(imagePkg, "linux-image-")
	root := filepath.Join(dir, "root")
	tools := []string{"make", "xz-utils", "binutils"}
	queue := []string{hdrPkg}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		dl := filepath.Join(dir, "debs", pkg)
		if err := os.MkdirAll(dl, 0o755); err != nil {
			return "", err
		}
		deb, err := aptDownload(ctx, dl, pkg+"="+version)
		if err != nil {
			return "", err
		}
		if _, err := runOut(ctx, "dpkg-deb", "-x", deb, root); err != nil {
			return "", err
		}
		field, err := runOut(ctx, "dpkg-deb", "-f", deb, "Depends")
		if err != nil {
			return "", err
		}
		for _, d := range parseDepends(field) {
			switch {
			case strings.HasPrefix(d, "linux-headers-") || strings.HasPrefix(d, "linux-kbuild-"):
				queue = append(queue, d)
			case !slices.Contains(tools, d):
				tools = append(tools, d)
			}
		}
		_ = os.Remove(deb)
	}
	if err := ensurePackages(ctx, log, tools); err != nil {
		return "", fmt.Errorf("tools to build kernel modules: %w", err)
	}
	headers := filepath.Join(root, "usr", "src", hdrPkg)
	// The flavour's Makefile includes the -common one by its installed
	// path; point it at the unpacked copy.
	mk := filepath.Join(headers, "Makefile")
	data, err := os.ReadFile(mk)
	if err != nil {
		return "", fmt.Errorf("headers: %w", err)
	}
	fixed := strings.ReplaceAll(string(data), "include /usr/src/", "include "+filepath.Join(root, "usr", "src")+"/")
	if err := os.WriteFile(mk, []byte(fixed), 0o644); err != nil {
		return "", err
	}
	config, err := os.ReadFile(filepath.Join(headers, ".config"))
	if err != nil {
		return "", fmt.Errorf("headers: %w", err)
	}
	if bytes.Contains(config, []byte("\nCONFIG_MODULE_SIG_FORCE=y\n")) {
		return "", fmt.Errorf("%s enforces module signatures (CONFIG_MODULE_SIG_FORCE=y): it would refuse modules built here", imagePkg)
	}
	return headers, nil
}

// parseDepends returns the package names of a Depends field, the first of
// each set of alternatives, without versions or architecture qualifiers.
func parseDepends(field string) []string {
	var out []string
	for _, dep := range strings.Split(field, ",") {
		alt, _, _ := strings.Cut(dep, "|")
		name, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
		name, _, _ = strings.Cut(name, ":")
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// installedVersion returns the installed version of a Debian package, or
// "" when it is not installed.
func installedVersion(ctx context.Context, pkg string) string {
	out, err := runOut(ctx, "dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", pkg)
	if err != nil {
		return ""
	}
	version, ok := strings.CutPrefix(strings.TrimSpace(out), "installed ")
	if !ok {
		return ""
	}
	return version
}

// ensurePackages installs the packages that are not installed (root only).
func ensurePackages(ctx context.Context, log *slog.Logger, pkgs []string) error {
	var missing []string
	for _, p := range pkgs {
		if installedVersion(ctx, p) == "" {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return aptInstall(ctx, log, missing...)
}

// sourceTarball returns Debian's kernel source tarball of version: the
// installed linux-source-<series> when it is that version, or the one in
// that package downloaded into dir.
func sourceTarball(ctx context.Context, dir, version string, log *slog.Logger) (string, error) {
	series, err := kernelSeries(version)
	if err != nil {
		return "", err
	}
	pkg := "linux-source-" + series
	name := pkg + ".tar.xz"
	installed := filepath.Join("/usr/src", name)
	if installedVersion(ctx, pkg) == version {
		if _, err := os.Stat(installed); err == nil {
			return installed, nil
		}
	}
	log.Info("downloading the kernel source", "package", pkg, "version", version)
	dl := filepath.Join(dir, "source")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return "", err
	}
	deb, err := aptDownload(ctx, dl, pkg+"="+version)
	if err != nil {
		return "", err
	}
	defer os.Remove(deb)
	tarball := filepath.Join(dl, name)
	found := false
	err = walkDeb(ctx, deb, func(h *tar.Header, r io.Reader) error {
		if h.Typeflag == tar.TypeReg && strings.TrimPrefix(h.Name, ".") == installed {
			found = true
			return writeFile(tarball, r)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("%s has no %s", filepath.Base(deb), installed)
	}
	return tarball, nil
}

// kernelSeries returns the upstream series ("6.1") of a Debian kernel
// version ("6.1.192-2").
func kernelSeries(version string) (string, error) {
	if _, v, ok := strings.Cut(version, ":"); ok {
		version = v // an epoch
	}
	version, _, _ = strings.Cut(version, "-")
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", fmt.Errorf("kernel version %q has no major.minor", version)
	}
	return parts[0] + "." + parts[1], nil
}

// readTarXZ returns the files at paths (relative to the tarball's top
// directory) of an xz-compressed tar, stopping once all were read.
func readTarXZ(ctx context.Context, tarball string, paths []string) (map[string][]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, "xz", "-dc", tarball)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	want := make(map[string]bool, len(paths))
	for _, p := range paths {
		want[p] = true
	}
	got := make(map[string][]byte, len(paths))
	tr := tar.NewReader(bufio.NewReaderSize(stdout, 1<<20))
	for len(got) < len(want) {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w: %s", tarball, err, tail(stderr.Bytes()))
		}
		_, rel, ok := strings.Cut(h.Name, "/")
		if !ok || !want[rel] || h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s from %s: %w", rel, tarball, err)
		}
		got[rel] = data
	}
	for _, p := range paths {
		if got[p] == nil {
			return nil, fmt.Errorf("%s has no %s", tarball, p)
		}
	}
	return got, nil
}
