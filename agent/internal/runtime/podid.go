// SPDX-License-Identifier: Apache-2.0

package runtime

// PodContainer splits the id of a Kubernetes runtime's container (POD/CONTAINER) into its
// Pod's and container's names; ok is false for any other runtime's id.
func PodContainer(id string) (pod, container string, ok bool) {
	pod, container, err := splitID(id)
	return pod, container, err == nil
}
