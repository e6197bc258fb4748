package spawn

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
)

// Build runs go build for the main package pkg (an import path of the
// module the working directory is in), with the race detector if race is
// set, and writes the binary to dir under the package's last path element.
// It returns the binary's path.
func Build(ctx context.Context, pkg, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, path.Base(pkg))
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}
